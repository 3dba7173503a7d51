"""Shared fixtures: a private PostgreSQL database and Redis db per test worker.

Every pytest-xdist worker gets its own database (created, migrated, dropped) and
its own Redis db number, so tests run in parallel without seeing each other.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, settings
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import Session

if TYPE_CHECKING:
    from tests.mlflowserver import MlflowServer

# The machine is shared: how fast Hypothesis generates inputs, or runs one example, says
# nothing about the code under test, so neither is a failure (the examples still run).
settings.register_profile("cohort", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("cohort")

# Agents keep warm replica processes by default (workers/node/pool_size.py); on a 2-core
# machine each costs seconds of CPU at every start, so the suite's agents, stacks and
# compose nodes (they inherit this environment) keep none, except where a test sets its
# own size: the pool's own tests, and the fault tests run once with pooled replicas.
os.environ.setdefault("COHORT_REPLICA_POOL_SIZE", "0")
# Replicas ship every step's points: many tests count a trainer's steps one by one. A
# node samples them above 10 steps a second by default (workers/step_records.py): the
# tests of that set it (tests/e2e/test_step_points.py, the drained trainer gang's).
os.environ.setdefault("COHORT_STEP_POINTS_PER_SECOND", "0")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Iterator[None]:
    """A real-stack test skipped for any reason but a missing capability fails
    (tests/capabilities.py says why)."""
    from tests.capabilities import allowed_skip, is_real_stack

    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.skipped and not hasattr(report, "wasxfail") and is_real_stack(item.path):
        reason = (
            str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
        )
        if not allowed_skip(reason):
            report.outcome = "failed"
            report.longrepr = (
                f"a real-stack test was skipped on a machine that can run it: {reason}"
            )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slowest modules first, the rest in their order. The real-process suite runs a
    whole file per xdist worker (`--dist loadfile --no-loadscope-reorder`), handed out in
    this order: a long file left for last keeps one worker busy while the other idles
    (the chaos soak, one test of three minutes, used to end the run alone). A module says
    how long it takes with `pytest.mark.slow(seconds)`: its time on the 2-core machine,
    roughly (`--durations`), only to order by."""

    def seconds(item: pytest.Item) -> float:
        marker = item.get_closest_marker("slow")
        return float(marker.args[0]) if marker and marker.args else 0.0

    items.sort(key=lambda item: -seconds(item))  # stable: the unmarked keep their order


PG_ADMIN_URL = os.environ.get(
    "COHORT_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
REDIS_BASE = os.environ.get("COHORT_TEST_REDIS", "redis://127.0.0.1:6379").rstrip("/")
if urllib.parse.urlsplit(REDIS_BASE).path:
    # The tests take dbs 1-15 of the server (redis_url): a db in the URL would be read as
    # part of theirs ("…/12" + "/1" asks for db 121).
    raise pytest.UsageError(
        f"COHORT_TEST_REDIS={REDIS_BASE!r} names a db: give the server alone, e.g. "
        "redis://127.0.0.1:6480 (a redis-server of the tests' own), and the tests use its dbs"
    )


def worker_number() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(worker.removeprefix("gw") or 0)


# Where this worker's stacks' replica ports start (COHORT_PORT_RANGE_START): concurrent runs
# on one machine give distinct bases (COHORT_TEST_PORT_BASE), and each pytest-xdist worker
# of a run takes its own thousand.
PORT_BASE = str(int(os.environ.get("COHORT_TEST_PORT_BASE", "29500")) + 1000 * worker_number())


@pytest.fixture(scope="session", autouse=True)
def _port_base_claimed() -> Iterator[None]:
    """This worker's thousand replica ports held, for the whole session, as a `cohort up`
    stack holds its range (cli/stack_ports.py): a stack given its range explicitly (every
    test stack) takes no claim, so a `cohort up` a test starts on another worker could
    choose a range of this one while nothing listens there, and its replica then find the
    port held by one of this worker's (test_local_stacks, once in four CI runs)."""
    from cli.stack_ports import RANGE_WIDTH, hold_range

    base = int(PORT_BASE)
    held = [hold_range(start) for start in (base, base + RANGE_WIDTH)]
    yield
    for fd in held:
        if fd is not None:
            os.close(fd)


# The Redis dbs of the tests on the machine's Redis (COHORT_TEST_REDIS), shared out in
# this one place: each xdist worker owns one db per use, so tests running at the same time
# on two workers never share (nor flush) one. A worker runs one test file at a time
# (--dist loadfile), so the files of one use on one worker take turns.
_REDIS_USES = ("fast", "stack", "install", "code", "agent", "fencing", "wipe")
_REDIS_WORKERS = 2  # 1 + 2 * 7 dbs of Redis' 16


def redis_url(use: str) -> str:
    """The URL of this xdist worker's Redis db for `use` (one of _REDIS_USES)."""
    worker = worker_number()
    if worker >= _REDIS_WORKERS:
        raise RuntimeError(
            f"tests share Redis' 16 dbs among {_REDIS_WORKERS} xdist workers "
            f"at most; run with -n {_REDIS_WORKERS} or fewer"
        )
    return f"{REDIS_BASE}/{1 + worker * len(_REDIS_USES) + _REDIS_USES.index(use)}"


def _database_url(name: str) -> str:
    return make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)


def _migrated_template(connection: sa.Connection) -> str:
    """The name of a database migrated to the newest schema, made once per migration
    tree (its name carries a digest of the migration files, so an edited migration makes
    a new one) by whichever test process comes first. The caller holds _TEMPLATE_LOCK.

    The newest KEEP_TEMPLATES stay: two checkouts' test sessions on one machine (a
    branch's and main's) each copy their own, and dropping the other's made its next copy
    fail ("template database ... does not exist": a CI run beside a session of 2026-11-29).
    Older ones go, by age (their oid)."""
    from cli.stack import migrate, migrations_directory

    digest = hashlib.sha1()
    for path in sorted(Path(migrations_directory()).rglob("*.py")):
        digest.update(path.read_bytes())
    name = f"cohort_template_{digest.hexdigest()[:12]}"
    found = list(
        connection.execute(
            sa.text(
                "SELECT datname FROM pg_database WHERE datname LIKE 'cohort\\_template\\_%' "
                "ORDER BY oid DESC"
            )
        ).scalars()
    )
    if name not in found:
        connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}.new" WITH (FORCE)'))
        connection.execute(sa.text(f'CREATE DATABASE "{name}.new"'))
        migrate(_database_url(f"{name}.new"))
        # Renamed only once migrated: a half-made template is never copied.
        connection.execute(sa.text(f'ALTER DATABASE "{name}.new" RENAME TO "{name}"'))
        found.insert(0, name)
    for old in [other for other in found if other != name][KEEP_TEMPLATES - 1 :]:
        connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{old}" WITH (FORCE)'))
    return name


_TEMPLATE_LOCK = 0x436F686F7254  # "CohorT": tests' template database
KEEP_TEMPLATES = 3


def create_database(name: str) -> str:
    """Create (anew) a PostgreSQL database at the newest migration and return its URL.

    A copy of a template migrated once (`CREATE DATABASE ... TEMPLATE`: a file copy, well
    under a second) instead of running every migration again for each test's database.
    The migrations themselves run for the template, and `cohort migrate` runs on a new
    database in tests/install. The template is made and copied under one lock, held by
    one test process at a time on the machine: no other drops it in between."""
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(sa.select(sa.func.pg_advisory_lock(_TEMPLATE_LOCK)))
            try:
                template = _migrated_template(connection)
                connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
                connection.execute(sa.text(f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))
            finally:
                connection.execute(sa.select(sa.func.pg_advisory_unlock(_TEMPLATE_LOCK)))
    finally:
        admin.dispose()
    return _database_url(name)


def drop_database(name: str) -> None:
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


# Port 9 (discard) on this machine: nothing listens, a connection is refused at once.
REFUSING_DATABASE_URL = "postgresql+psycopg://postgres@127.0.0.1:9/x"


@contextmanager
def database_refused() -> Iterator[None]:
    """Within the block, this process's engine points at a port where no database
    answers (as during a restart of PostgreSQL); afterwards at the one before."""
    from services.db import get_engine, get_sessionmaker
    from services.settings import get_settings

    caches = (get_settings, get_engine, get_sessionmaker)
    before = os.environ.get("COHORT_DATABASE_URL")
    os.environ["COHORT_DATABASE_URL"] = REFUSING_DATABASE_URL
    for cached in caches:
        cached.cache_clear()
    try:
        yield
    finally:
        get_engine().dispose()
        if before is None:
            os.environ.pop("COHORT_DATABASE_URL")
        else:
            os.environ["COHORT_DATABASE_URL"] = before
        for cached in caches:
            cached.cache_clear()


@pytest.fixture(scope="session")
def replicas_tmp_root() -> Iterator[Path]:
    """A temporary directory for this session that other users can pass through (0711).

    Tests run as root, where an agent runs each job's replicas as the job's own uid
    (workers/node/isolation.py): they must reach their DATA_DIR, as on a real node.
    pytest's own directories cannot serve: every pytest session that starts on the
    machine resets /tmp/pytest-of-<user> to 0700, cutting off running replicas."""
    # Not under /tmp: an agent as root gives each replica a /tmp of its own
    # (workers/private_tmp.py), where another node's DATA_DIR of a test with two agents
    # on this host (a parameter_server gang writing the chief's checkpoint path) would not
    # be; a real node's DATA_DIR is not under /tmp either.
    root = Path(tempfile.mkdtemp(prefix="cohort-tests-", dir="/var/tmp"))
    root.chmod(0o711)
    yield root
    if not os.environ.get("COHORT_KEEP_TEST_DIRS"):  # set: kept for a failure's post-mortem
        shutil.rmtree(root, ignore_errors=True)


def reachable_dir(root: Path, prefix: str) -> Path:
    """A new directory under `root` (`replicas_tmp_root`) that replicas running as their
    job's own uid can pass through (0711; mkdtemp makes 0700)."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=root))
    path.chmod(0o711)
    return path


@pytest.fixture
def tmp_path(request: pytest.FixtureRequest, replicas_tmp_root: Path) -> Path:
    """A fresh directory per test, under `replicas_tmp_root` (reachable by replicas)."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)[:40]
    return reachable_dir(replicas_tmp_root, f"{name}-")


@pytest.fixture(scope="session")
def pg_url(replicas_tmp_root: Path) -> Iterator[str]:
    """A migrated database private to this test worker."""
    name = f"cohort_test_{os.getpid()}_{worker_number()}"
    url = create_database(name)
    # Processes and code under test read their settings from the environment.
    os.environ["COHORT_DATABASE_URL"] = url
    os.environ["COHORT_REDIS_URL"] = redis_url("fast")
    os.environ["COHORT_DATA_DIR"] = str(reachable_dir(replicas_tmp_root, "data-"))
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
    db = Session(bind=connection, join_transaction_mode="create_savepoint", expire_on_commit=False)
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


@pytest.fixture(scope="session")
def mlflow_server(replicas_tmp_root: Path) -> Iterator[MlflowServer]:
    """A real MLflow tracking server (tests/mlflowserver.py) for this test session."""
    from tests.e2e.conftest import free_port
    from tests.mlflowserver import MlflowServer

    server = MlflowServer(
        Path(tempfile.mkdtemp(prefix="mlflow-", dir=replicas_tmp_root)), free_port()
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture(params=["local", "s3"])
def artifact_env(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
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
