"""End to end: what a writer to Redis without the keys cannot do (services/wire/signing.py).

On the real stack (PostgreSQL, Redis, the scheduler and an agent as processes): start
messages on the node's queue that are unsigned, signed with another key, sealed for
another node, or replayed past COHORT_MESSAGE_MAX_AGE start nothing (the agent's log says
why); a ReplicaExited for a running replica from another node, or unsigned, does not end
the job; a heartbeat without the node's key registers no node. And the commands an
operator runs: `cohort node-key`, and an agent or a scheduler without its key.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from cli.stack import Stack
from cohort.client import Client
from services.wire.events import NodeHeartbeat, ReplicaExited
from services.wire.keys import (
    EVENTS_STREAM,
    NODES_HASH,
    SCHEDULER_PASS,
    STATS_HASH,
    claim_key,
)
from services.wire.replica import START_TASK, ReplicaSpec, StartReplica
from services.wire.signing import HEARTBEAT, node_key, seal, seal_message, sign_event
from tests.e2e.conftest import wait_for, wait_terminal
from workers import layout
from workers.celery_app import make_celery

pytestmark = pytest.mark.e2e

NODE = "e2e-node"  # the stack's agent (tests/e2e/conftest.py)
OTHER_KEY = "o" * 64  # a signing key that is not the control plane's


def bus(stack: Stack) -> redis.Redis:
    return redis.Redis.from_url(stack.settings.redis_url, decode_responses=True)


def agent_log(stack: Stack) -> str:
    return (stack.log_dir / "agent.log").read_text(errors="replace")


def refused_count(stack: Stack, reason: str) -> int:
    return int(bus(stack).hget(STATS_HASH, f"refused:{reason}") or 0)


def passes_after(stack: Stack, moment: float, passes: int = 3) -> None:
    """Wait until the scheduler has run `passes` passes, the first one after `moment`."""
    client = bus(stack)
    seen: set[str] = set()

    def done() -> bool:
        last = client.get(SCHEDULER_PASS)
        if last is not None and float(last) > moment:
            seen.add(last)
        return len(seen) >= passes

    wait_for(done, 30, f"{passes} scheduling passes", interval=0.1)


def test_start_messages_without_the_nodes_valid_seal_start_nothing(
    pg_stack: tuple[Stack, Client],
) -> None:
    stack, _client = pg_stack
    signing_key = stack.env["COHORT_SIGNING_KEY"]
    own, other = node_key(signing_key, NODE), node_key(signing_key, "e2e-node-b")
    max_age = stack.settings.MESSAGE_MAX_AGE
    jobs = {
        990_001: "unsigned",
        990_002: "bad signature",
        990_003: "another node",
        990_004: "stale",
    }

    def start(job_id: int) -> StartReplica:
        # A built-in trainer: the node's policy would run it, were the message genuine.
        return StartReplica(
            NODE,
            ReplicaSpec(
                job_id, 1, 0, 1, "mlp_digits", "one_device", {"epochs": 1, "steps_per_epoch": 2}
            ),
        )

    sealed = {
        990_001: start(990_001).encode(),  # the message as it was before signing
        990_002: seal_message(node_key(OTHER_KEY, NODE), start(990_002)),
        990_003: seal_message(other, StartReplica("e2e-node-b", start(990_003).spec)),
        # Sealed by the right key, but as a copy replayed long after it was sent.
        990_004: seal_message(own, start(990_004), now=time.time() - max_age - 30),
    }
    app = make_celery(stack.settings.redis_url)
    for raw in sealed.values():
        app.send_task(START_TASK, args=[raw], queue=f"node.{NODE}")

    def all_refused() -> bool:
        return agent_log(stack).count("refused a start_replica message") >= len(jobs)

    wait_for(all_refused, 60, "the agent to refuse the four messages")
    text = agent_log(stack)
    for reason in jobs.values():
        assert f"refused a start_replica message: {reason}:" in text, text[-3000:]
    client = bus(stack)
    for job_id in jobs:
        # Nothing claimed, fetched, started or reported for any of them.
        assert not layout.work_dir(stack.settings.data_dir, job_id, 1, 0).exists()
        assert client.get(claim_key(job_id, 1, 0)) is None
        assert not [
            f
            for _, f in client.xrange(EVENTS_STREAM)
            if json.loads(f["data"]).get("job_id") == job_id
        ]

    # The same message sealed as the scheduler seals it runs: the refusals were the seals'.
    app.send_task(START_TASK, args=[seal_message(own, start(990_005))], queue=f"node.{NODE}")
    wait_for(
        lambda: client.get(claim_key(990_005, 1, 0)) == NODE,
        60,
        "the agent to claim the genuine start",
    )


def test_a_heartbeat_without_the_nodes_key_registers_no_node(
    pg_stack: tuple[Stack, Client],
) -> None:
    stack, client = pg_stack
    redis_client = bus(stack)
    before = refused_count(stack, "unsigned") + refused_count(stack, "bad signature")
    now = time.time()
    beat = NodeHeartbeat("intruder", "10.9.9.9", 64, now, gpus=8).encode()
    redis_client.hset(
        NODES_HASH,
        mapping={
            "intruder": beat,  # no seal at all
            # Sealed, but with a key the control plane did not derive for it.
            "intruder-2": seal(
                node_key(OTHER_KEY, "intruder-2"),
                purpose=HEARTBEAT,
                node_id="intruder-2",
                body=beat.replace("intruder", "intruder-2"),
            ),
            # A real node's key, speaking for another node.
            "intruder-3": seal(
                node_key(stack.env["COHORT_SIGNING_KEY"], NODE),
                purpose=HEARTBEAT,
                node_id=NODE,
                body=beat,
            ),
        },
    )
    passes_after(stack, time.time())
    nodes = {node["id"]: node for node in client.nodes()}
    assert set(nodes) == {NODE}, nodes
    assert nodes[NODE]["status"] == "ready"
    after = (
        refused_count(stack, "unsigned")
        + refused_count(stack, "bad signature")
        + refused_count(stack, "another node")
    )
    assert after - before >= 3  # each value counted once, however many passes read it
    log = (stack.log_dir / "scheduler.log").read_text()
    assert "ignoring the heartbeat of node 'intruder': unsigned" in log


def test_a_forged_exit_does_not_end_a_running_job(pg_stack: tuple[Stack, Client]) -> None:
    stack, client = pg_stack
    job = client.submit(
        {
            "name": "trusted",
            "trainer": "mlp_digits",
            "strategy": "one_device",
            "replicas": 1,
            "restart_policy": "never",
            "hyperparameters": {"epochs": 2, "steps_per_epoch": 60},
        }
    )
    wait_for(lambda: client.job(job["id"])["status"] == "running", 120, "the job to run")
    redis_client = bus(stack)
    signing_key = stack.env["COHORT_SIGNING_KEY"]

    def exit_from(node_id: str) -> dict[str, Any]:
        event = ReplicaExited(node_id, job["id"], 1, 0, 1, time.time(), "forged: boom")
        return {k: str(v) for k, v in event.entry().items()}

    # Node b, with its own valid key, reports node e2e-node's replica as failed ...
    from_b = exit_from("e2e-node-b")
    from_b["sig"] = sign_event(
        node_key(signing_key, "e2e-node-b"), "e2e-node-b", "replica_exited", from_b["data"]
    )
    # ... and someone without any key reports it in e2e-node's name.
    unsigned = exit_from(NODE)
    before = refused_count(stack, "another node"), refused_count(stack, "unsigned")
    for fields in (from_b, unsigned):
        redis_client.xadd(EVENTS_STREAM, fields)  # type: ignore[arg-type]
    wait_for(
        lambda: (
            (refused_count(stack, "another node"), refused_count(stack, "unsigned"))
            >= (before[0] + 1, before[1] + 1)
        ),
        30,
        "the scheduler to refuse both exits",
    )
    assert client.job(job["id"])["status"] == "running"
    final = wait_terminal(client, job["id"])
    assert final["status"] == "succeeded", final["reason"]
    assert [r["exit_code"] for r in final["replica_list"]] == [0]
    log = (stack.log_dir / "scheduler.log").read_text()
    assert (
        f"replica_exited of replica {job['id']}/1/0 from node 'e2e-node-b', which runs "
        f"on '{NODE}'" in log
    )


def cohort(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("COHORT_")}
    return subprocess.run(
        [sys.executable, "-m", "cli", *argv],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_node_key_prints_the_key_an_agent_needs_and_services_without_keys_stop(
    tmp_path: Path,
) -> None:
    signing_key = "x" * 48
    printed = cohort("node-key", "gpu-box-2", COHORT_SIGNING_KEY=signing_key)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.strip() == node_key(signing_key, "gpu-box-2")
    short = cohort("node-key", "gpu-box-2", COHORT_SIGNING_KEY="short")
    assert short.returncode == 1 and "COHORT_SIGNING_KEY is 5 characters" in short.stderr
    data = str(tmp_path / "var")
    agent = cohort("agent", COHORT_NODE_ID="gpu-box-2", COHORT_DATA_DIR=data)
    assert agent.returncode == 1
    assert agent.stderr.strip().splitlines()[-1] == (
        "cohort: COHORT_NODE_KEY is not set: on the control plane, `cohort node-key "
        "gpu-box-2` prints this node's key (derived from COHORT_SIGNING_KEY; the agent "
        "never holds that)"
    )
    scheduler = cohort("scheduler", COHORT_DATA_DIR=data)
    assert scheduler.returncode == 1
    assert (
        scheduler.stderr.strip()
        .splitlines()[-1]
        .startswith("cohort: COHORT_SIGNING_KEY is not set")
    )
