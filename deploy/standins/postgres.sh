#!/bin/bash
# The stand-in's PostgreSQL: what docker-compose.yml relies on of the postgres image's
# entrypoint, from Debian's postgresql-15. On an empty data directory (PGDATA): initdb
# with POSTGRES_USER and POSTGRES_PASSWORD, the database POSTGRES_DB, then each script of
# /docker-entrypoint-initdb.d (deploy/postgres: the services' role) against a server that
# listens on its socket only; then the server, on every address, password logins only.
set -euo pipefail
export PGDATA="${PGDATA:-/var/lib/postgresql/data}"
export POSTGRES_USER="${POSTGRES_USER:-postgres}"
export POSTGRES_DB="${POSTGRES_DB:-$POSTGRES_USER}"
: "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"

if [ "$(id -u)" = 0 ]; then
    mkdir -p "$PGDATA" /run/postgresql
    chown -R postgres:postgres "$PGDATA" /run/postgresql
    chmod 700 "$PGDATA"
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

# Set once every init script has run: a start that finds a data directory without it (an
# init cut short, a script that failed) makes it again rather than serve a database
# without its roles.
DONE="$PGDATA/.standin-initialized"
if [ ! -e "$DONE" ]; then
    find "$PGDATA" -mindepth 1 -delete
    initdb --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") \
        --auth-local=trust --auth-host=scram-sha-256 -D "$PGDATA" > /dev/null
    printf "host all all all scram-sha-256\n" >> "$PGDATA/pg_hba.conf"
    pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -k /run/postgresql" -w start > /dev/null
    if [ "$POSTGRES_DB" != postgres ]; then
        psql -v ON_ERROR_STOP=1 --no-psqlrc -h /run/postgresql -U "$POSTGRES_USER" -d postgres \
            -v db="$POSTGRES_DB" <<< 'CREATE DATABASE :"db"' > /dev/null
    fi
    export PGHOST=/run/postgresql
    # As the postgres image does: an executable script runs by its own interpreter, any
    # other is sourced.
    for script in /docker-entrypoint-initdb.d/*.sh; do
        [ -e "$script" ] || continue
        echo "stand-in postgres: running $script"
        if [ -x "$script" ]; then "$script"; else . "$script"; fi
    done
    unset PGHOST
    pg_ctl -D "$PGDATA" -m fast -w stop > /dev/null
    touch "$DONE"
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' -k /run/postgresql
