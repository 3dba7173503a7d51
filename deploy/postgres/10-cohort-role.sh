#!/bin/sh
# The role the Cohort services log in as: it owns nothing and may only read and write rows.
# The database and its tables belong to the owner (POSTGRES_USER, who runs `cohort migrate`);
# default privileges give the service role its rights on every table a later migration
# creates, so an upgrade needs no new GRANT.
#
# The postgres image runs this once, on an empty data directory, as POSTGRES_USER
# (mounted in /docker-entrypoint-initdb.d). Run it by hand (same variables, plus PGHOST)
# against an existing database: every statement may run again.
#   POSTGRES_USER     the owner: creates the tables (migrations)      default postgres
#   POSTGRES_DB       the database                                   default $POSTGRES_USER
#   COHORT_DB_USER    the services' role                             default cohort
#   COHORT_DB_PASSWORD  its password                                 required
set -eu
: "${COHORT_DB_PASSWORD:?set COHORT_DB_PASSWORD: the password of the role the services log in as}"
owner="${POSTGRES_USER:-postgres}"
database="${POSTGRES_DB:-$owner}"
role="${COHORT_DB_USER:-cohort}"

psql -v ON_ERROR_STOP=1 --no-psqlrc --username "$owner" --dbname "$database" \
     -v owner="$owner" -v database="$database" -v role="$role" \
     -v password="$COHORT_DB_PASSWORD" <<'SQL'
SELECT NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'role') AS create_role \gset
\if :create_role
CREATE ROLE :"role" LOGIN PASSWORD :'password';
\else
ALTER ROLE :"role" LOGIN PASSWORD :'password';
\endif
-- Not PUBLIC's CREATE on the schema (PostgreSQL 15 revokes it; older ones grant it).
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT CONNECT, TEMPORARY ON DATABASE :"database" TO :"role";
GRANT USAGE ON SCHEMA public TO :"role";
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO :"role";
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO :"role";
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA public
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO :"role";
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA public
    GRANT USAGE, SELECT ON SEQUENCES TO :"role";
SQL
