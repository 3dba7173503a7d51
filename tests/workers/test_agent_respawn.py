"""A parameter_server worker whose process dies is started again in place by its agent,
a bounded number of times, each reported; nothing else is (real processes, no TensorFlow)."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis

from services.settings import Settings
from services.wire.keys import EVENTS_STREAM, attempt_key, claim_key
from services.wire.replica import ReplicaSpec, StartReplica, StopReplica
from tests.conftest import redis_url
from workers.node.agent import Agent
from workers.node.launcher import ReplicaKey

JOB = 990_301
SERVE = ["python", "-c", "import time; time.sleep(300)"]  # a server never exits by itself


@pytest.fixture
def bus() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url("agent"), decode_responses=True)
    client.delete(
        *(attempt_key(job) for job in range(JOB, JOB + 4)),
        *(claim_key(job, 1, i) for job in range(JOB, JOB + 4) for i in range(4)),
    )
    yield client
    client.close()


@pytest.fixture
def node(tmp_path: Path, bus: redis.Redis) -> Iterator[Agent]:
    agent = Agent(
        Settings(
            DATA_DIR=tmp_path,
            NODE_ID="respawn",
            PS_WORKER_RESTARTS=1,
            NODE_KEY="ab" * 32,
            STOP_GRACE=1.0,
        ),
        bus,
    )
    yield agent
    agent.shutdown(grace=1.0)


def start(job_id: int, role: str, index: int) -> StartReplica:
    return StartReplica(
        "respawn",
        ReplicaSpec(
            job_id,
            1,
            index,
            4,
            None,
            "parameter_server",
            command=SERVE,
            role=role,  # type: ignore[arg-type]
            role_index=0,
        ),
    )


def newest_event(client: redis.Redis) -> str:
    newest = client.xrevrange(EVENTS_STREAM, count=1)
    return str(newest[0][0]) if newest else "0-0"


def wait_event(
    client: redis.Redis, kind: str, job_id: int, since: str, timeout: float = 30
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for _, fields in client.xrange(EVENTS_STREAM, min=f"({since}"):
            data = json.loads(fields["data"])
            if fields["kind"] == kind and data["job_id"] == job_id:
                return data
        time.sleep(0.1)
    raise AssertionError(f"no {kind} of job {job_id} within {timeout:.0f}s")


def pid_of(node: Agent, key: ReplicaKey) -> int:
    with node.lock:
        return node.processes[key].popen.pid


def test_a_killed_worker_is_started_again_until_its_budget_is_spent(
    node: Agent, bus: redis.Redis
) -> None:
    key = ReplicaKey(JOB, 1, 1)
    since = newest_event(bus)
    node.start_replica(start(JOB, "worker", 1))
    first = wait_event(bus, "replica_started", JOB, since)["pid"]
    since = newest_event(bus)
    os.kill(first, signal.SIGKILL)
    restarted = wait_event(bus, "replica_restarted", JOB, since)
    assert restarted["exit_code"] == 137 and restarted["restarts"] == 1
    second = restarted["pid"]
    assert second != first and psutil.pid_exists(second)
    assert pid_of(node, key) == second  # still listed: the heartbeat keeps it running
    log = node.data_dir / "jobs" / str(JOB) / "logs" / "attempt-1" / "replica-1.log"
    assert "started again in place (1 of 1)" in log.read_text()
    # The budget (PS_WORKER_RESTARTS=1) is spent: the next exit is reported as such.
    since = newest_event(bus)
    os.kill(second, signal.SIGKILL)
    assert wait_event(bus, "replica_exited", JOB, since)["exit_code"] == 137
    assert key not in node.processes


@pytest.mark.parametrize(("job_id", "role"), [(JOB + 1, "ps"), (JOB + 2, "chief")])
def test_a_chief_or_ps_exit_is_reported_not_restarted(
    node: Agent, bus: redis.Redis, job_id: int, role: str
) -> None:
    since = newest_event(bus)
    node.start_replica(start(job_id, role, 0 if role == "chief" else 3))
    pid = wait_event(bus, "replica_started", job_id, since)["pid"]
    since = newest_event(bus)
    os.kill(pid, signal.SIGKILL)
    assert wait_event(bus, "replica_exited", job_id, since)["exit_code"] == 137
    assert not [
        f for _, f in bus.xrange(EVENTS_STREAM, min=f"({since}") if f["kind"] == "replica_restarted"
    ]


def test_a_worker_asked_to_stop_is_not_started_again(node: Agent, bus: redis.Redis) -> None:
    since = newest_event(bus)
    node.start_replica(start(JOB + 3, "worker", 1))
    wait_event(bus, "replica_started", JOB + 3, since)
    since = newest_event(bus)
    node.stop_replica(StopReplica("respawn", JOB + 3, 1, 1, 1.0))
    assert wait_event(bus, "replica_exited", JOB + 3, since)["exit_code"] == 143
    assert not [
        f for _, f in bus.xrange(EVENTS_STREAM, min=f"({since}") if f["kind"] == "replica_restarted"
    ]
