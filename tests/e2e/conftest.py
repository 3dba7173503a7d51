"""Fixtures that start the real stack: api, scheduler and a Celery agent as processes."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from cli.client import CohortClient
from cli.stack import Stack
from services.statuses import TERMINAL_STATUSES
from tests.conftest import REDIS_BASE, create_database, drop_database

# Where replica ports start; give concurrent test runs on one machine distinct bases.
PORT_BASE = os.environ.get("COHORT_TEST_PORT_BASE", "29500")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(predicate: Callable[[], Any], timeout: float, what: str,
             interval: float = 0.2) -> Any:
    """Poll `predicate` until it returns something truthy; fail with `what` on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def wait_terminal(client: CohortClient, job_id: int, timeout: float = 180) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        job = client.job(job_id)
        return job if job["status"] in TERMINAL_STATUSES else None

    return wait_for(done, timeout, f"job {job_id} to finish", interval=0.5)


@contextlib.contextmanager
def pg_stack_with(tmp_path: Any, env: dict[str, str] | None = None,
                  parts: tuple[str, ...] = ("api", "scheduler", "agent"),
                  ) -> Iterator[tuple[Stack, CohortClient]]:
    """The stack (or only `parts` of it) on a PostgreSQL database of its own and the
    machine's Redis (a db of its own, flushed), with `env` added to its settings."""
    name = f"cohort_e2e_{free_port()}"
    url = create_database(name)
    redis_url = f"{REDIS_BASE}/{os.environ.get('COHORT_TEST_E2E_REDIS_DB', '9')}"
    redis.Redis.from_url(redis_url).flushdb()
    stack = Stack({"COHORT_DATABASE_URL": url, "COHORT_REDIS_URL": redis_url,
                   "COHORT_DATA_DIR": str(tmp_path / "data"),
                   "COHORT_API_PORT": str(free_port()), "COHORT_NODE_ID": "e2e-node",
                   "COHORT_PORT_RANGE_START": PORT_BASE,
                   "COHORT_BOOTSTRAP_TOKEN": "e2e-token", **(env or {})}, quiet=True)
    stack.start(parts)
    try:
        yield stack, CohortClient(stack.url, stack.token)
    finally:
        stack.stop()
        drop_database(name)


@pytest.fixture
def pg_stack(tmp_path: Any) -> Iterator[tuple[Stack, CohortClient]]:
    """The stack on PostgreSQL and the machine's Redis (a db of its own, flushed)."""
    with pg_stack_with(tmp_path) as stack:
        yield stack


@pytest.fixture
def embedded_stack(tmp_path: Any) -> Iterator[tuple[Stack, CohortClient]]:
    """The stack on the embedded defaults: SQLite under DATA_DIR and an embedded Redis."""
    stack = Stack({"COHORT_DATABASE_URL": "", "COHORT_REDIS_URL": "",
                   "COHORT_DATA_DIR": str(tmp_path / "var"),
                   "COHORT_EMBEDDED_REDIS_PORT": str(free_port()),
                   "COHORT_PORT_RANGE_START": PORT_BASE,
                   "COHORT_API_PORT": str(free_port())}, quiet=True)
    stack.start()
    try:
        yield stack, CohortClient(stack.url, stack.token)
    finally:
        stack.stop()
