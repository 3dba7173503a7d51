"""Fixtures for the live-stream tests: a real api server (uvicorn in a thread) on the
test database, committed test data, and the ingest run by hand."""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import uvicorn

from services.wire.keys import METRICS_STREAM
from tests.capabilities import need_redis_server
from tests.e2e.conftest import free_port, wait_for
from tests.factories import create_job, create_token


@pytest.fixture
def bus(pg_url: str) -> redis.Redis:  # noqa: ARG001 - pg_url points settings at test Redis
    from services.wire.client import get_redis

    client = get_redis()
    client.flushdb()
    return client


@pytest.fixture
def committed(pg_url: str) -> Iterator[Callable[..., tuple[str, int]]]:  # noqa: ARG001
    """Make a token and a job in a committed transaction: (token, job id). The jobs are
    deleted afterwards: a queued job left behind would take the place of a later test's
    job on the same worker's database.

    Each test's projects are its own (`project` names one within the test): a committed
    project "default" would be found by every later test on the worker's database,
    whose rolled-back transactions otherwise each make a new one, and share its id, so
    its paths in the worker's artifact store (an api test's upload then found the
    previous test's file)."""
    from services.db import session_scope
    from services.jobs import store as jobs

    made: list[int] = []
    own = uuid.uuid4().hex[:8]

    def make(project: str = "default", **spec: Any) -> tuple[str, int]:
        with session_scope() as session:
            token, row = create_token(session, f"{project}-{own}")
            job = create_job(session, row.project_id, **{"name": "live", "replicas": 2, **spec})
            made.append(job.id)
            return token, job.id

    yield make
    with session_scope() as session:
        jobs.delete_jobs(session=session, job_ids=made)


@pytest.fixture
def live_api(pg_url: str) -> Iterator[str]:  # noqa: ARG001
    """The api served by uvicorn on a free port, against the test database and Redis."""
    from api.main import create_app

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(),
            host="127.0.0.1",
            port=port,
            log_level="warning",
            lifespan="off",
            timeout_graceful_shutdown=1,
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, 30, "the api to start")
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


# The signing key of the schedulers these tests run by hand (nodes' keys derive from it).
SIGNING_KEY = "0" * 64


class Kept:
    """A scheduler's sender that keeps the messages it would send to nodes."""

    def __init__(self) -> None:
        self.messages: list[Any] = []

    def send(self, messages: list[Any]) -> None:
        self.messages += messages


def ship_points(
    client: redis.Redis, job_id: int, points: list[list[Any]], attempt: int = 1, replica: int = 0
) -> None:
    """Append one metric batch as a replica's agent does: `points` are rows of [step,
    epoch, name, value, ts]."""
    batch = {"job_id": job_id, "attempt": attempt, "replica": replica, "points": points}
    client.xadd(METRICS_STREAM, {"data": json.dumps(batch)})


def ingest_until(
    client: redis.Redis, expected: int, kind: str = "metric", timeout: float = 30
) -> int:
    """Run the leader's ingest by hand until `expected` new rows are stored."""
    from services.db import session_scope
    from workers.control.ingest import LOGS, METRICS, ingest_once

    feed = METRICS if kind == "metric" else LOGS
    stored, deadline = 0, time.monotonic() + timeout
    while stored < expected and time.monotonic() < deadline:
        stored += ingest_once(client, feed, sessions=session_scope, block_ms=100)
    return stored


class Server:
    """A private redis-server that keeps nothing on disk: killed, it comes back empty."""

    def __init__(self, tmp_path: Path) -> None:
        binary = need_redis_server()
        self.binary, self.port, self.dir = binary, free_port(), tmp_path
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.dir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        probe = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        wait_for(lambda: _answers(probe), 10, "redis-server to start")

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(10)


def _answers(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    """A private redis-server of the test's own, killed after it if still running."""
    server = Server(tmp_path)
    server.start()
    yield server
    if server.process is not None and server.process.poll() is None:
        server.kill()
