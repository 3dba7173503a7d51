"""Alembic environment: the URL comes from services.settings, never from alembic.ini."""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from services.db import make_engine
from services.models import Base
from services.settings import get_settings

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = Base.metadata


def run_migrations_offline() -> None:
    context.configure(
        url=get_settings().database_url,
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    url = config.attributes.get("database_url") or get_settings().database_url
    engine = make_engine(url)
    with engine.connect() as connection:
        if connection.dialect.name == "sqlite":
            # Batch mode alters a SQLite table by copying it and dropping the old one, which
            # with foreign keys enforced deletes its rows' references elsewhere or fails
            # (a job a model version holds). SQLite's own advice: no enforcement while a
            # migration runs. The pragma counts only outside a transaction, so it goes to
            # the driver's connection before the migration's begins; the engine is
            # disposed after, and every new connection has enforcement on again.
            connection.connection.dbapi_connection.execute("PRAGMA foreign_keys=OFF")  # type: ignore[union-attr]
        # Batch mode lets the same migrations alter tables on SQLite.
        context.configure(
            connection=connection, target_metadata=target_metadata, render_as_batch=True
        )
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
