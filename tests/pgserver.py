"""A PostgreSQL server of a test's own (initdb + pg_ctl), which the test may stop and start.

The machine's shared server (127.0.0.1:5432) serves every test run at once; a test that
restarts PostgreSQL restarts this one. PostgreSQL refuses to run as root, so as root the
server runs as the `postgres` user (`runuser`), in a directory that user owns.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

BINARIES = Path("/usr/lib/postgresql/15/bin")
SERVER_USER = "postgres"  # the account PostgreSQL runs as when the tests run as root


def binary(name: str) -> str | None:
    """A PostgreSQL server program (initdb, pg_ctl), or None."""
    candidate = BINARIES / name
    return str(candidate) if candidate.exists() else shutil.which(name)


def server_user() -> str | None:
    """Who runs the server: this user, or as root the `postgres` account (None: none)."""
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid()).pw_name
    try:
        pwd.getpwnam(SERVER_USER)
    except KeyError:
        return None
    return SERVER_USER if shutil.which("runuser") else None


@dataclass
class PostgresServer:
    """One server: its data directory, port and the URL of a database on it."""

    directory: Path
    port: int

    @property
    def data(self) -> Path:
        return self.directory / "data"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *argv: str) -> None:
        prefix = ["runuser", "-u", SERVER_USER, "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *argv], check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        initdb = binary("initdb")
        assert initdb is not None
        self._run(
            initdb,
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
        )

    def start(self) -> None:
        """Start and wait until it accepts connections."""
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 "
            f"-c unix_socket_directories={self.directory} -c fsync=off "
            "-c max_connections=300"
        )
        pg_ctl = binary("pg_ctl")
        assert pg_ctl is not None
        self._run(
            pg_ctl,
            "-D",
            str(self.data),
            "-l",
            str(self.directory / "server.log"),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        )

    def stop(self, mode: str = "fast") -> None:
        """Stop it: `fast` ends every session (as a restart does), `immediate` crashes it."""
        pg_ctl = binary("pg_ctl")
        assert pg_ctl is not None
        self._run(pg_ctl, "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def create_database(self, name: str) -> str:
        """Create a database; returns its URL."""
        admin = sa.create_engine(self.url(), isolation_level="AUTOCOMMIT")
        with admin.connect() as connection:
            connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
        admin.dispose()
        return self.url(name)


@contextmanager
def postgres_server(port: int) -> Iterator[PostgresServer]:
    """A new server on 127.0.0.1:`port`, removed with its files afterwards."""
    user = server_user()
    assert user is not None, "tests/capabilities.py: need_postgres_server() first"
    # Not under pytest's tmp_path: /tmp/pytest-of-root is 0700, closed to the postgres user.
    root = Path(tempfile.mkdtemp(prefix="cohort-pg-"))
    root.chmod(0o711)
    directory = root / "pg"
    directory.mkdir(mode=0o700)
    account = pwd.getpwnam(user)
    os.chown(directory, account.pw_uid, account.pw_gid)
    server = PostgresServer(directory, port)
    try:
        server.init()
        server.start()
        yield server
    finally:
        try:
            server.stop("immediate")
        except subprocess.CalledProcessError:
            pass  # already stopped
        shutil.rmtree(root, ignore_errors=True)
