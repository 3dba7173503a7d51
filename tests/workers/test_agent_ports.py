"""The agent and ports held by processes outside Cohort: reported in the heartbeat, and a
replica whose port is taken is refused with a reason instead of being spawned."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from services.settings import Settings
from services.wire.keys import EVENTS_STREAM, NODES_HASH, attempt_key, claim_key
from services.wire.replica import ReplicaSpec, StartReplica
from tests.conftest import redis_url
from workers.node.agent import Agent
from workers.node.exits import PORT_TAKEN_EXIT

JOB = 990_001


@pytest.fixture
def bus() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url("agent"), decode_responses=True)
    client.delete(EVENTS_STREAM, NODES_HASH, attempt_key(JOB), claim_key(JOB, 1, 0))
    yield client
    client.close()


@pytest.fixture
def foreign_listener() -> Iterator[int]:
    """A process outside Cohort listening on a port (here: this test)."""
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))  # noqa: S104
        sock.listen()
        yield int(sock.getsockname()[1])


def test_taken_port_is_reported_and_refused(
    tmp_path: Path, bus: redis.Redis, foreign_listener: int
) -> None:
    port = foreign_listener
    settings = Settings(
        DATA_DIR=tmp_path,
        NODE_ID="ports",
        NODE_SLOTS=1,
        NODE_KEY="ab" * 32,
        PORT_RANGE_START=port,
        PORT_RANGE_END=port,
    )
    agent = Agent(settings, bus)

    agent.heartbeat()
    beat = json.loads(json.loads(bus.hget(NODES_HASH, "ports") or "{}")["body"])
    assert beat["busy_ports"] == [port]
    assert beat["port_space"] and beat["gpu_ids"] == [] and beat["gpus"] == 0

    agent.start_replica(
        StartReplica("ports", ReplicaSpec(JOB, 1, 0, 1, "mlp_digits", "one_device"), port=port)
    )
    assert agent.processes == {}  # nothing was spawned
    events = [
        json.loads(fields["data"])
        for _, fields in bus.xrange(EVENTS_STREAM)
        if fields["kind"] == "replica_exited"
    ]
    assert len(events) == 1
    assert events[0]["exit_code"] == PORT_TAKEN_EXIT and events[0]["job_id"] == JOB
    assert f"port {port} is held by another process" in events[0]["log_tail"]
