"""Fault-test fixtures: the real stack on PostgreSQL with its own Redis (which a test may
kill and restart) and short timeouts, plus helpers that record what each fault cost."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from cli.client import CohortClient
from cli.stack import Stack
from tests.conftest import create_database, drop_database
from tests.e2e.conftest import PORT_BASE, free_port

# COHORT_BOOTSTRAP_TOKEN: an admin token needs at least 32 characters.
FAULT_TOKEN = "fault-bootstrap-token-for-tests-only"

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"

# Short enough to keep the tests quick, long enough not to fire on a busy 2-core box.
FAST = {
    "COHORT_HEARTBEAT_INTERVAL": "1", "COHORT_NODE_TIMEOUT": "6", "COHORT_AGENT_LEASE": "4",
    "COHORT_PROGRESS_TIMEOUT": "8", "COHORT_STARTUP_TIMEOUT": "90",
    "COHORT_RESTART_BACKOFF": "1", "COHORT_STOP_GRACE": "5", "COHORT_SCHEDULER_INTERVAL": "0.5",
}

LONG_JOB: dict[str, Any] = {
    "name": "long", "replicas": 2, "restart_policy": "on_failure", "max_restarts": 2,
    "hyperparameters": {"epochs": 6, "steps_per_epoch": 100},
}


@pytest.fixture
def make_stack(tmp_path: Path) -> Iterator[Callable[..., tuple[Stack, CohortClient]]]:
    """Start a stack: `make_stack(slots=2)`; stopped and its database dropped after."""
    made: list[tuple[Stack, str]] = []

    def make(slots: int = 2, **env: str) -> tuple[Stack, CohortClient]:
        name = f"cohort_fault_{free_port()}"
        url = create_database(name)
        stack = Stack({**FAST, "COHORT_DATABASE_URL": url, "COHORT_REDIS_URL": "",
                       "COHORT_EMBEDDED_REDIS_PORT": str(free_port()),
                       "COHORT_DATA_DIR": str(tmp_path / f"data-{len(made)}"),
                       "COHORT_API_PORT": str(free_port()), "COHORT_NODE_ID": "node-a",
                       "COHORT_NODE_SLOTS": str(slots), "COHORT_PORT_RANGE_START": PORT_BASE,
                       "COHORT_BOOTSTRAP_TOKEN": FAULT_TOKEN, **env}, quiet=True)
        made.append((stack, name))
        stack.start()
        return stack, CohortClient(stack.url, stack.token)

    yield make
    for stack, name in made:
        stack.stop()
        drop_database(name)


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def steps_seen(client: CohortClient, job_id: int, attempt: int) -> list[int]:
    points = client.metrics(job_id, name=["loss"], replica=0, attempt=attempt, limit=100_000)
    return [p["step"] for p in points]


def event_time(client: CohortClient, job_id: int, status: str, attempt: int | None = None
               ) -> float | None:
    import datetime as dt

    for event in client.events(job_id):
        if event["to_status"] == status and (attempt is None or event["attempt"] == attempt):
            return dt.datetime.fromisoformat(event["created_at"]).timestamp()
    return None


def record(fault: str, action: str, detect_s: float | None, recover_s: float | None,
           lost: str) -> None:
    """Append one measured row for docs/reliability.md."""
    ARTIFACTS.mkdir(exist_ok=True)
    row = {"fault": fault, "action": action, "detect_s": detect_s, "recover_s": recover_s,
           "lost": lost, "at": time.strftime("%Y-%m-%d %H:%M:%S")}
    with open(ARTIFACTS / "reliability.jsonl", "a") as handle:
        handle.write(json.dumps(row) + "\n")
