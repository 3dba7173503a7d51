"""A benchmark's own PostgreSQL database on a server given by its admin URL: made empty
(the benchmark or its stack migrates it) and dropped when the benchmark ends."""

from __future__ import annotations

import uuid

import sqlalchemy as sa

DEFAULT_SERVER = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def new_database(server: str, prefix: str) -> str:
    """A new empty database `<prefix>_<random>` on `server`; its URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return sa.engine.make_url(server).set(database=name).render_as_string(hide_password=False)


def drop_database(server: str, url: str) -> None:
    """Drop the database of `url` from `server`, closing whatever still uses it."""
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        name = sa.engine.make_url(url).database
        connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()
