"""Shared fixtures: a private PostgreSQL database and Redis db per test worker.

Every pytest-xdist worker gets its own database (created, migrated, dropped) and
its own Redis db number, so tests run in parallel without seeing each other.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, settings
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import Session

# The machine is shared: how fast Hypothesis generates inputs, or runs one example, says
# nothing about the code under test, so neither is a failure (the examples still run).
settings.register_profile("cohort", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("cohort")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Iterator[None]:
    """A real-stack test skipped for any reason but a missing capability fails
    (tests/capabilities.py says why)."""
    from tests.capabilities import allowed_skip, is_real_stack

    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.skipped and not hasattr(report, "wasxfail") and is_real_stack(item.path):
        reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) \
            else str(report.longrepr)
        if not allowed_skip(reason):
            report.outcome = "failed"
            report.longrepr = (f"a real-stack test was skipped on a machine that can run "
                               f"it: {reason}")

PG_ADMIN_URL = os.environ.get("COHORT_TEST_PG_URL",
                              "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
REDIS_BASE = os.environ.get("COHORT_TEST_REDIS", "redis://127.0.0.1:6379")


def worker_number() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(worker.removeprefix("gw") or 0)


def create_database(name: str) -> str:
    """Create (anew) a PostgreSQL database, migrate it, and return its URL."""
    from cli.stack import migrate

    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    url = make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    migrate(url)
    return url


def drop_database(name: str) -> None:
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="session")
def replicas_tmp_root() -> Iterator[Path]:
    """A temporary directory for this session that other users can pass through (0711).

    Tests run as root, where an agent runs each job's replicas as the job's own uid
    (workers/node/isolation.py): they must reach their DATA_DIR, as on a real node.
    pytest's own directories cannot serve: every pytest session that starts on the
    machine resets /tmp/pytest-of-<user> to 0700, cutting off running replicas."""
    root = Path(tempfile.mkdtemp(prefix="cohort-tests-"))
    root.chmod(0o711)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def tmp_path(request: pytest.FixtureRequest, replicas_tmp_root: Path) -> Path:
    """A fresh directory per test, under `replicas_tmp_root` (reachable by replicas)."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)[:40]
    path = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=replicas_tmp_root))
    path.chmod(0o711)
    return path


@pytest.fixture(scope="session")
def pg_url(replicas_tmp_root: Path) -> Iterator[str]:
    """A migrated database private to this test worker."""
    name = f"cohort_test_{os.getpid()}_{worker_number()}"
    url = create_database(name)
    # Processes and code under test read their settings from the environment.
    os.environ["COHORT_DATABASE_URL"] = url
    os.environ["COHORT_REDIS_URL"] = f"{REDIS_BASE}/{1 + worker_number()}"
    data = Path(tempfile.mkdtemp(prefix="data-", dir=replicas_tmp_root))
    data.chmod(0o711)
    os.environ["COHORT_DATA_DIR"] = str(data)
    from services.db import get_engine, get_sessionmaker
    from services.settings import get_settings
    from services.wire.client import get_redis

    get_settings.cache_clear()
    get_engine.cache_clear()
    get_sessionmaker.cache_clear()
    get_redis.cache_clear()
    yield url
    get_engine().dispose()
    drop_database(name)


@pytest.fixture(scope="session")
def engine(pg_url: str) -> Engine:  # noqa: ARG001 - pg_url points the engine at the test DB
    from services.db import get_engine

    return get_engine()


@pytest.fixture
def session(engine: Engine) -> Iterator[Session]:
    """A session inside a transaction that is rolled back after the test.

    Commits made by the code under test become savepoints of that transaction.
    """
    connection = engine.connect()
    outer = connection.begin()
    db = Session(bind=connection, join_transaction_mode="create_savepoint",
                 expire_on_commit=False)
    try:
        yield db
    finally:
        db.close()
        outer.rollback()
        connection.close()


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A real S3-compatible server (moto's standalone server) with the bucket `cohort-test`."""
    from tests.e2e.conftest import free_port
    from tests.s3server import create_bucket, moto_server

    with moto_server(free_port()) as endpoint:
        create_bucket(endpoint, "cohort-test")
        yield endpoint


@pytest.fixture(params=["local", "s3"])
def artifact_env(request: pytest.FixtureRequest, tmp_path: Path,
                 monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """COHORT_ARTIFACT_URL (and for S3 the endpoint and AWS_* credentials) set in the real
    environment: a fresh directory, or a fresh prefix of a bucket on a real S3 server.
    Returns the store's URL; `open_store()` and every process started now find it."""
    import uuid

    from services.settings import get_settings
    from tests.s3server import CREDENTIALS

    if request.param == "s3":
        endpoint = request.getfixturevalue("s3_endpoint")
        url = f"s3://cohort-test/run-{uuid.uuid4().hex[:12]}"
        monkeypatch.setenv("COHORT_ARTIFACT_ENDPOINT_URL", endpoint)
        for name, value in CREDENTIALS.items():
            monkeypatch.setenv(name, value)
    else:
        url = str(tmp_path / "artifacts")
    monkeypatch.setenv("COHORT_ARTIFACT_URL", url)
    get_settings.cache_clear()
    yield url
    monkeypatch.undo()
    get_settings.cache_clear()
