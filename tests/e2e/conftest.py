"""Fixtures that start the real stack: api, scheduler and a Celery agent as processes."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from cli.stack import Stack
from cohort.client import Client
from services.statuses import TERMINAL_STATUSES
from tests.capabilities import need_chromium
from tests.conftest import (
    PORT_BASE,
    create_database,
    drop_database,
    reachable_dir,
    redis_url,
)

# COHORT_BOOTSTRAP_TOKEN: an admin token needs at least 32 characters.
E2E_TOKEN = "e2e-bootstrap-token-for-tests-only"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports: each held until all are chosen (a TF cluster's)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def wait_for(
    predicate: Callable[[], Any],
    timeout: float,
    what: str,
    interval: float = 0.2,
    explain: Callable[[], str] | None = None,
) -> Any:
    """Poll `predicate` until it returns something truthy; fail with `what` on timeout,
    and with what `explain()` then says (the state that tells why it never came)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    message = f"timed out after {timeout:.0f}s waiting for {what}"
    if explain is not None:
        message += f"\n{explain()}"
    raise AssertionError(message)


def job_story(client: Client, job_id: int) -> str:
    """A job's state for a failure message: its status and reason, its replicas and the
    path of its events. A replica reads (index, node, status, exit code, restarts)."""
    job = client.job(job_id)
    replicas = [
        (r["index"], r["node_id"], r["status"], r["exit_code"], r["restarts"])
        for r in job["replica_list"]
    ]
    events = [(e["to_status"], e["attempt"], e["reason"]) for e in client.events(job_id)]
    return (
        f"job {job_id}: {job['status']} ({job['reason']}), attempt {job['attempt']}, "
        f"replicas {replicas}, events {events}"
    )


def wait_terminal(client: Client, job_id: int, timeout: float = 180) -> dict[str, Any]:
    """The job once its status is terminal and it has settled: what its replicas shipped
    is in SQL. The status turns terminal when the control plane decides it, which can be
    before the ingest has stored the replicas' last points and lines; the job's stream
    sends its terminal status only after (services/telemetry/settling.py), so a test that
    reads the points next reads them all. (A short attempt on a busy machine was read
    before any of its points were stored.)"""

    def done() -> dict[str, Any] | None:
        job = client.job(job_id)
        return job if job["status"] in TERMINAL_STATUSES else None

    job = wait_for(done, timeout, f"job {job_id} to finish", interval=0.5)
    for _ in client.stream(job_id, kinds=("status",)):  # ends with the settled status
        pass
    return job


@contextlib.contextmanager
def pg_stack_with(
    tmp_path: Any,
    env: dict[str, str] | None = None,
    parts: tuple[str, ...] = ("api", "scheduler", "agent"),
) -> Iterator[tuple[Stack, Client]]:
    """The stack (or only `parts` of it) on a PostgreSQL database of its own and the
    machine's Redis (a db of its own, flushed), with `env` added to its settings."""
    name = f"cohort_e2e_{free_port()}"
    url = create_database(name)
    stack_redis = redis_url("stack")
    redis.Redis.from_url(stack_redis).flushdb()
    stack = Stack(
        {
            "COHORT_DATABASE_URL": url,
            "COHORT_REDIS_URL": stack_redis,
            "COHORT_DATA_DIR": str(tmp_path / "data"),
            "COHORT_API_PORT": str(free_port()),
            "COHORT_NODE_ID": "e2e-node",
            "COHORT_PORT_RANGE_START": PORT_BASE,
            "COHORT_BOOTSTRAP_TOKEN": E2E_TOKEN,
            **(env or {}),
        },
        quiet=True,
    )
    stack.start(parts)
    try:
        yield stack, Client(stack.url, stack.token)
    finally:
        stack.stop()
        drop_database(name)


@pytest.fixture
def pg_stack(tmp_path: Any) -> Iterator[tuple[Stack, Client]]:
    """The stack on PostgreSQL and the machine's Redis (a db of its own, flushed)."""
    with pg_stack_with(tmp_path) as stack:
        yield stack


@pytest.fixture(scope="module")
def module_stack(
    request: pytest.FixtureRequest, replicas_tmp_root: Path
) -> Iterator[tuple[Stack, Client]]:
    """One `pg_stack` for all of a module's tests: a stack costs about 5 s and 9 CPU-s to
    start and stop (docs/benchmarks.md, "A stack's start and stop"). For tests whose
    claims are about their own jobs only; a test that restarts a part, counts what a log
    or a listing holds, or leaves something running (a schedule) takes `pg_stack`.
    Its Redis is a redis-server of its own: the worker's Redis db is the `pg_stack` of the
    module's other tests, which flushes it while this stack lives."""
    name = request.module.__name__.rsplit(".", 1)[-1]
    data_dir = reachable_dir(replicas_tmp_root, f"{name}-")
    with pg_stack_with(
        data_dir, {"COHORT_REDIS_URL": "", "COHORT_EMBEDDED_REDIS_PORT": str(free_port())}
    ) as stack:
        yield stack


@pytest.fixture
def embedded_stack(tmp_path: Any) -> Iterator[tuple[Stack, Client]]:
    """The stack on the embedded defaults: SQLite under DATA_DIR and an embedded Redis."""
    stack = Stack(
        {
            "COHORT_DATABASE_URL": "",
            "COHORT_REDIS_URL": "",
            "COHORT_DATA_DIR": str(tmp_path / "var"),
            "COHORT_EMBEDDED_REDIS_PORT": str(free_port()),
            "COHORT_PORT_RANGE_START": PORT_BASE,
            "COHORT_API_PORT": str(free_port()),
        },
        quiet=True,
    )
    stack.start()
    try:
        yield stack, Client(stack.url, stack.token)
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium (Debian's, never a downloaded one) for a module's tests."""
    from playwright.sync_api import sync_playwright

    chromium = need_chromium()
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(chromium),
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        yield browser
        browser.close()
