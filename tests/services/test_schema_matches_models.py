"""The schema the migrations build is the one the models declare: every table, column,
type, index (partial ones with their conditions' columns) and constraint, on SQLite (the
embedded default) and on PostgreSQL. A model changed without its migration, or a
migration without its model, fails here, not on a user's first upgrade."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from services.db import make_engine
from services.models import Base
from tests.services.test_sweep_trials_migration import upgrade


def test_the_migrations_build_what_the_models_declare(bare_database_url: str) -> None:
    upgrade(bare_database_url, "head")
    engine = make_engine(bare_database_url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            differences = compare_metadata(context, Base.metadata)
    finally:
        engine.dispose()
    assert differences == [], differences
