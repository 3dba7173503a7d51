"""An agent whose Redis lost its data (here: FLUSHDB of a database of this test's own)
writes back what was its own: its queue's binding, the claims of the replicas it started,
their `replica_started` events; a copy of a start message then starts nothing anywhere."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from services.settings import Settings
from services.wire.keys import EVENTS_STREAM, claim_key
from services.wire.replica import ReplicaSpec, StartReplica
from tests.conftest import redis_url
from tests.e2e.conftest import wait_for
from workers.node.agent import Agent
from workers.node.launcher import ReplicaKey, ReplicaProcess

RUNNING = ReplicaKey(990_101, 1, 0)


@pytest.fixture
def bus() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url("wipe"), decode_responses=True)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


def test_after_a_wipe_the_agent_claims_again_what_it_runs(tmp_path: Path, bus: redis.Redis) -> None:
    declared: list[float] = []
    a = Agent(
        Settings(
            DATA_DIR=tmp_path / "a", NODE_ID="wipe-a", NODE_KEY="ab" * 32, HEARTBEAT_INTERVAL=0.2
        ),
        bus,
        lambda: declared.append(time.time()),
    )
    b = Agent(Settings(DATA_DIR=tmp_path / "b", NODE_ID="wipe-b", NODE_KEY="cd" * 32), bus)
    process = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True
    )
    a.processes[RUNNING] = ReplicaProcess(RUNNING, process, tmp_path / "log", time.time())
    a.started.add(RUNNING)
    claim = claim_key(RUNNING.job_id, RUNNING.attempt, RUNNING.index)
    bus.set(claim, "wipe-a")  # as its start wrote it
    thread = threading.Thread(target=a.heartbeat_loop, daemon=True)
    thread.start()
    try:
        wait_for(lambda: a.generation.seen, 10, "the agent to see the data generation")
        assert declared == []  # nothing lost yet

        bus.flushdb()  # the claim, the events, the marker: gone
        wait_for(lambda: bus.get(claim) == "wipe-a", 10, "the agent to claim its replica")
        assert len(declared) == 1  # its queue declared again, once
        started = [
            json.loads(fields["data"])
            for _, fields in bus.xrange(EVENTS_STREAM)
            if fields["kind"] == "replica_started"
        ]
        assert [(e["job_id"], e["attempt"], e["index"], e["pid"]) for e in started] == [
            (RUNNING.job_id, RUNNING.attempt, RUNNING.index, process.pid)
        ]

        # A copy of its start message sent to another node: the claim refuses it there.
        b.start_replica(
            StartReplica("wipe-b", ReplicaSpec(RUNNING.job_id, 1, 0, 1, "mlp_digits", "one_device"))
        )
        assert b.processes == {} and b.preparing == {}
        assert bus.get(claim) == "wipe-a"
        time.sleep(0.5)  # two more heartbeats: the wipe is not seen twice
        assert len(declared) == 1
    finally:
        a.stopping.set()
        process.kill()
        process.wait()
