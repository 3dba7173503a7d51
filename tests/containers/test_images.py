"""The images `make images` builds, tried as they are shipped.

Each image imports every module its processes run (an undeclared dependency fails here,
not in a scheduler that cannot dispatch), answers `cohort --help` and
`cohort health --help`, runs as its user (control: uid 10001; worker: root, for the
agent's per-job replica uids) and carries its HEALTHCHECK. The control image
then runs for real against the host's PostgreSQL and Redis: `cohort migrate` on an empty
database, the api until its own HEALTHCHECK command passes, the scheduler until it has run
a pass, each as uid 10001, and a Celery message goes to Redis as the scheduler sends one.
"""

from __future__ import annotations

import secrets
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import redis
import sqlalchemy as sa

from tests.conftest import PG_ADMIN_URL, _database_url, redis_url
from tests.containers.conftest import Images

pytestmark = [pytest.mark.slow(600), pytest.mark.timeout(1800)]

SERVICE_UID = 10001
# What each image's processes import: for control the api, the scheduler (and the Celery
# app and kombu's Redis transport it sends through) and `cohort migrate`; for worker the
# agent, the guard and replica runner it starts, and the replicas' TensorFlow and Keras.
IMPORTS = {
    "control": (
        "api.main",
        "workers.control.scheduler",
        "workers.celery_app",
        "kombu.transport.redis",
        "cli.stack",
        "cli.main",
        "uvicorn",
        "alembic.command",
        "psycopg",
    ),
    "worker": (
        "workers.node.agent_process",
        "workers.node.guard",
        "workers.replica.runner",
        "workers.replica.pool_entry",
        "kombu.transport.redis",
        "tensorflow",
        "tf_keras",
        "tensorboard",
        "pynvml",
        "crc32c",
    ),
}
HEALTHCHECKS = {"control": "api", "worker": "agent"}
RUN_AS = {"control": SERVICE_UID, "worker": 0}
SENT_QUEUE = "cohort.images-test"


@pytest.mark.parametrize("target", ["control", "worker"])
def test_image_imports_what_its_processes_run(images: Images, target: str) -> None:
    modules = IMPORTS[target]
    script = f"import importlib\nfor name in {modules!r}:\n    importlib.import_module(name)\n"
    script += "print('imported', len(" + repr(modules) + "))"
    out = images.run(target, "python", "-P", "-c", script)
    assert f"imported {len(modules)}" in out


def test_kombu_finds_its_redis_transport_in_control(images: Images) -> None:
    # How the scheduler reaches it: by the broker URL's scheme, at the first send.
    script = (
        "from kombu import Connection\n"
        "print(Connection('redis://127.0.0.1:9/0').transport_cls, "
        "Connection('redis://127.0.0.1:9/0').transport.__module__)"
    )
    out = images.run("control", "python", "-c", script)
    assert "kombu.transport.redis" in out


@pytest.mark.parametrize("target", ["control", "worker"])
def test_cli_answers_in_each_image(images: Images, target: str) -> None:
    top = images.run(target, "cohort", "--help")
    assert "health" in top and "scheduler" in top
    health = images.run(target, "cohort", "health", "--help")
    assert "Usage: cohort health" in health and "api|scheduler|agent" in health


@pytest.mark.parametrize("target", ["control", "worker"])
def test_image_runs_as_its_user_with_its_healthcheck(images: Images, target: str) -> None:
    """Control runs as the service user, with /data its own; worker's agent as root, so
    that it can run each job's replicas as a uid of the job's (tests/containers/
    test_compose.py checks what a replica then sees)."""
    uid = RUN_AS[target]
    inspected = images.inspect(target)
    config = inspected.get("Config") or {}
    assert config.get("User") == f"{uid}:{uid}"
    healthcheck = config.get("Healthcheck") or inspected.get("Healthcheck") or {}
    assert healthcheck.get("Test") == ["CMD", "cohort", "health", HEALTHCHECKS[target]]
    ids = images.run(target, "sh", "-c", "id -u; id -g; stat -c %u /data; touch /data/written")
    assert ids.split() == [str(uid), str(uid), str(SERVICE_UID)]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.fixture
def empty_database() -> Iterator[str]:
    name = f"cohort_images_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield _database_url(name)
    finally:
        with admin.connect() as connection:
            connection.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@contextmanager
def service(images: Images, env: dict[str, str], *command: str) -> Iterator[str]:
    """A detached container of the control image on the host's network; its name."""
    name = f"cohort-test-{uuid.uuid4().hex[:10]}"
    settings = [argument for key, value in env.items() for argument in ("-e", f"{key}={value}")]
    subprocess.run(
        [images.engine, "run", "--detach", "--name", name, "--network", "host", *settings]
        + [images.refs["control"], *command],
        capture_output=True,
        timeout=120,
        check=True,
    )
    try:
        yield name
    finally:
        subprocess.run([images.engine, "rm", "--force", name], capture_output=True, check=False)


def exec_in(images: Images, name: str, *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [images.engine, "exec", name, *command],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def wait_until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s"
        time.sleep(1)


def logs(images: Images, name: str) -> str:
    done = subprocess.run(
        [images.engine, "logs", name], capture_output=True, text=True, timeout=60, check=False
    )
    return done.stdout + done.stderr


def pid1_uid(images: Images, name: str) -> int:
    status = exec_in(images, name, "cat", "/proc/1/status").stdout
    line = next(line for line in status.splitlines() if line.startswith("Uid:"))
    return int(line.split()[1])


@pytest.fixture
def redis_db() -> Iterator[str]:
    """The Redis db of this worker's installed-product tests (they take turns), emptied."""
    url = redis_url("install")
    client = redis.Redis.from_url(url)
    client.flushdb()
    try:
        yield url
    finally:
        client.flushdb()
        client.close()


def test_control_image_migrates_serves_and_schedules(
    images: Images, empty_database: str, redis_db: str
) -> None:
    env = {
        "COHORT_DATABASE_URL": empty_database,
        "COHORT_REDIS_URL": redis_db,
        "COHORT_BOOTSTRAP_TOKEN": secrets.token_hex(32),
        "COHORT_SIGNING_KEY": secrets.token_hex(32),
        "COHORT_API_HOST": "127.0.0.1",
        "COHORT_API_PORT": str(free_port()),
    }
    settings = [argument for key, value in env.items() for argument in ("-e", f"{key}={value}")]
    migrate = subprocess.run(
        [images.engine, "run", "--rm", "--network", "host", *settings]
        + [images.refs["control"], "cohort", "migrate"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert migrate.returncode == 0, migrate.stdout + migrate.stderr
    assert "newest migration" in migrate.stdout
    with service(images, env) as api, service(images, env, "cohort", "scheduler") as scheduler:
        # The image's own HEALTHCHECK command, run where the engine would run it.
        wait_until(
            lambda: exec_in(images, api, "cohort", "health", "api").returncode == 0,
            120,
            f"the api's healthcheck\n{logs(images, api)}",
        )
        wait_until(
            lambda: exec_in(images, scheduler, "cohort", "health", "scheduler").returncode == 0,
            120,
            f"the scheduler's healthcheck\n{logs(images, scheduler)}",
        )
        assert pid1_uid(images, api) == SERVICE_UID
        assert pid1_uid(images, scheduler) == SERVICE_UID
        # A message sent the way the scheduler sends to an agent's queue: Celery's app
        # through kombu's Redis transport, from the control image to the real Redis.
        send = exec_in(
            images,
            scheduler,
            "python",
            "-c",
            "from workers.celery_app import app; "
            f"app.send_task('cohort.images-test', queue={SENT_QUEUE!r})",
        )
        assert send.returncode == 0, send.stdout + send.stderr
        with redis.Redis.from_url(redis_db) as client:
            assert client.llen(SENT_QUEUE) == 1
        for name in (api, scheduler):
            assert "Traceback" not in logs(images, name), logs(images, name)
