"""Engine, sessions and the transaction scope used by every process that holds SQL."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar, TypeVarTuple

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from services.data_dir import make_private
from services.settings import get_settings


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets the api read while the scheduler writes; busy_timeout makes a
    # writer wait for the lock instead of failing at once.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _private_sqlite_file(url: str) -> None:
    """Create the SQLite database file of `url` as 0600 if it is missing, and take group
    and other permissions off it and off its WAL, shared-memory and journal files.

    It holds every job's `env` secrets and every token's hash, and replicas run on the
    same host. SQLite creates the WAL and shared-memory files with the database file's
    mode, so a 0600 database keeps them 0600 too; a file an older version made 0644 is
    fixed here, before any connection opens it. Never through a link."""
    database = sa.engine.make_url(url).database
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    path = Path(database).absolute()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError:
        return  # no such directory, a link: SQLite says what is wrong when it connects
    os.close(fd)
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for suffix in ("", "-wal", "-shm", "-journal"):
            make_private(path.name + suffix, directory)
    finally:
        os.close(directory)


def make_engine(url: str) -> Engine:
    """Build an engine for `url`, with the SQLite settings the embedded mode needs."""
    if url.startswith("sqlite"):
        _private_sqlite_file(url)
        engine = sa.create_engine(url, connect_args={"check_same_thread": False, "timeout": 10})
        sa.event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    # More connections than the api's thread pool (40) has threads: a request's sync
    # dependencies each take a thread while its session holds a connection, so a
    # smaller pool lets a burst of requests block every thread waiting on each other.
    return sa.create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=40)


def database_unreachable(exc: BaseException) -> bool:
    """Whether `exc` says the database could not be reached or was lost mid-statement (a
    refused or dropped connection, a server restarting, a locked SQLite file, no pooled
    connection free in time): worth retrying the same work later. Any other database
    error is a bug or bad data, and retrying would repeat it."""
    if isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated:
        return True  # SQLAlchemy saw the driver's disconnect (closed, reset, shut down)
    return isinstance(exc, sa.exc.OperationalError | sa.exc.InterfaceError | sa.exc.TimeoutError)


@lru_cache(maxsize=1)
def get_engine() -> Engine:
    """The process-wide engine for the configured database."""
    return make_engine(get_settings().database_url)


@lru_cache(maxsize=1)
def get_sessionmaker() -> sessionmaker[Session]:
    """The process-wide session factory."""
    return sessionmaker(bind=get_engine(), expire_on_commit=False)


# What hands out short transactions: session_scope, or a test's savepoints.
Sessions = Callable[[], AbstractContextManager[Session]]


@contextmanager
def session_scope() -> Iterator[Session]:
    """One transaction: commit on success, roll back on error, always close."""
    session = get_sessionmaker()()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


Columns = TypeVarTuple("Columns")


def read_rows(session: Session, query: sa.Select[*Columns]) -> Sequence[sa.Row[*Columns]]:
    """The rows of a query of columns (not of mapped objects), run on the session's
    connection once its pending changes are flushed: the ORM's handling of each row
    costs a scheduling pass a quarter more on the tens of thousands of rows it reads of
    jobs and replicas, for nothing it uses."""
    if session.autoflush:  # as the session's own execute (off under no_autoflush)
        session.flush()
    return session.connection().execute(query).all()


Row = TypeVar("Row")

# The largest id of a job, schedule or sweep (SQL INTEGER keys, PostgreSQL's int4): the
# bound of every id a request names, and of the keyset cursors.
MAX_SQL_INT = 2**31 - 1


def newest_first_page(
    session: Session, query: sa.Select[Row], id_column: Any, before: int | None, limit: int
) -> tuple[list[Row], int | None]:
    """One page of `query` by descending id below `before` (keyset paging); returns the
    rows and the id to continue below, or None on the last page."""
    if before is not None:
        query = query.where(id_column < before)
    rows = list(session.execute(query.order_by(id_column.desc()).limit(limit + 1)).scalars())
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, (getattr(rows[-1], id_column.key) if more and rows else None)
