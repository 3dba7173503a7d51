"""Fixtures of the service tests that need a database of their own, not the suite's
migrated copy: migration tests, which build the schema themselves."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.conftest import PG_ADMIN_URL, _database_url, drop_database


@pytest.fixture(params=["sqlite", "postgresql"])
def bare_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database, on SQLite (the embedded default) and on PostgreSQL (one of its
    own, dropped after the test)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'cohort.db'}"
        return
    name = f"cohort_migration_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    try:
        yield _database_url(name)
    finally:
        drop_database(name)
