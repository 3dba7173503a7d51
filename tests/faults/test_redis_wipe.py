"""Redis loses its data mid-job: flushed (`FLUSHALL`: the server and its `run_id` stay) or
replaced by an empty server on the same address. Either erases the metric and log entries
not yet stored, the agents' events, the replica claims, the current attempts, the queues'
bindings and the leader's lock; every process notices it by the generation marker
(services/wire/generation.py) and writes back what was its own."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from cli.stack import Stack
from cohort.client import Client
from services.wire.acl import BINDING_PREFIXES
from services.wire.keys import (
    EVENTS_STREAM,
    METRICS_STREAM,
    SCHEDULER_LOCK,
    attempt_key,
    claim_key,
)
from services.wire.replica import ReplicaSpec, StartReplica
from tests.e2e.conftest import free_port, job_story, wait_for, wait_terminal
from tests.e2e.stepper import stepping_job
from tests.faults.conftest import GANG, record, steps_seen
from tests.faults.lost_messages import claimed, log_of, send_start
from tests.faults.nothing_lost import assert_nothing_lost
from tests.faults.test_two_leaders import LEADS, tokens_led

pytestmark = pytest.mark.e2e

# Long enough to run through the second agent's start, the wipe and the checks after it
# on a slow machine (400 ended before the freeze on a VM 2.4x slower than the usual).
STEPS = 1000
# Steppers (tests/e2e/stepper.py) for 12 s: what is tested is what Redis forgot.
JOB: dict[str, Any] = stepping_job(STEPS, 0.03, name="wiped", **GANG)
# What ends a scheduler's term in its log (workers/control/scheduler.py, term.py).
TERM_ENDS = re.compile(r"stepping down: |redis unavailable|could not take a fencing token")


def leading_token(stack: Stack, name: str) -> int | None:
    """The fencing token of the term scheduler `name` leads now (by its log), if any."""
    token = None
    for line in log_of(stack, name).splitlines():
        if found := LEADS.search(line):
            token = int(found.group(1))
        elif TERM_ENDS.search(line):
            token = None
    return token


def starts(bus: redis.Redis, job_id: int) -> set[tuple[int, int, str, int]]:
    """(attempt, index, node, pid) of each `replica_started` event of the job in Redis."""
    found = set()
    for _id, fields in bus.xrange(EVENTS_STREAM):
        data = json.loads(fields["data"])
        if fields["kind"] == "replica_started" and data["job_id"] == job_id:
            found.add((data["attempt"], data["index"], data["node_id"], data["pid"]))
    return found


def flushall(stack: Stack) -> None:
    bus = redis.Redis.from_url(stack.settings.redis_url)
    run_id = bus.info("server")["run_id"]
    bus.flushall()
    assert bus.info("server")["run_id"] == run_id  # the same server: run_id tells nothing


def replace_with_an_empty_server(stack: Stack) -> None:
    stack.kill("redis")  # SIGKILL; it keeps nothing on disk
    stack.restart_redis()  # a new server, empty, on the same port


def wipe_mid_job(
    make_stack: Callable[..., tuple[Stack, Client]],
    tmp_path: Path,
    wipe: Callable[[Stack], None],
    fault: str,
) -> None:
    node_a, node_b = f"wipe-a-{free_port()}", f"wipe-b-{free_port()}"
    stack, client = make_stack(COHORT_NODE_ID=node_a)
    stack.add_scheduler("scheduler-b")  # a standby: one of the two must lead after
    job_id = client.submit(JOB)["id"]
    wait_for(lambda: max(steps_seen(client, job_id, 1) or [0]) >= 100, 240, "training")
    running = client.job(job_id)
    assert running["attempt"] == 1 and {r["node_id"] for r in running["replica_list"]} == {
        node_a
    }, running["replica_list"]
    # A second node, with a data directory of its own, to be sent a copy of a start
    # message of a replica node_a runs: only the claim can stop it.
    stack.add_agent(node_b, 1, data_dir=str(tmp_path / "data-b"))
    wait_for(
        lambda: {n["id"] for n in client.nodes() if n["status"] == "ready"} >= {node_a, node_b},
        60,
        "the second agent to register",
    )
    led_before = max(tokens_led(stack, "scheduler") + tokens_led(stack, "scheduler-b"))
    bus = redis.Redis.from_url(stack.settings.redis_url, decode_responses=True)

    started_before = starts(bus, job_id)  # the wipe erases the events stream
    # Both schedulers frozen a moment, so that the wipe erases metric batches and log
    # lines nobody stored yet (the leader stores them within milliseconds otherwise).
    schedulers = [stack.child(name).pid for name in ("scheduler", "scheduler-b")]
    for pid in schedulers:
        os.kill(pid, signal.SIGSTOP)
    try:
        # (Log lines too when the replicas print meanwhile; a quiet log may not.)
        unstored = bus.xlen(METRICS_STREAM)
        wait_for(
            lambda: bus.xlen(METRICS_STREAM) >= unstored + 2,
            30,
            "metric batches that no one stored",
        )
        wiped_at = time.time()
        wipe(stack)
    finally:
        for pid in schedulers:
            os.kill(pid, signal.SIGCONT)

    # The agent claims again the replicas it runs, the leader writes the current attempt
    # again from SQL, and a scheduler takes the lock with a new fencing token.
    claims = [claim_key(job_id, 1, index) for index in range(JOB["replicas"])]
    wait_for(
        lambda: bus.mget(claims) == [node_a] * len(claims),
        30,
        "the agent to claim its replicas again",
    )
    wait_for(
        lambda: bus.get(attempt_key(job_id)) == "1",
        30,
        "the leader to write the current attempt again",
    )
    wait_for(lambda: bus.exists(SCHEDULER_LOCK), 30, "a scheduler to take the lock")
    restored_at = time.time()

    # node_b's agent declares its queue again (kombu's binding): until then, what is sent
    # to the queue is dropped, as the scheduler's re-sends would be.
    wait_for(
        lambda: bus.exists(f"{BINDING_PREFIXES[0]}node.{node_b}"),
        30,
        "the second agent to declare its queue again",
    )
    # A copy of replica 0's start message, sealed for node_b as the scheduler seals them:
    # the claim node_a wrote back is all that stands between it and a second process.
    replica = running["replica_list"][0]
    start = StartReplica(
        node_b,
        ReplicaSpec(
            job_id, 1, 0, JOB["replicas"], None, "multi_worker_mirrored", command=JOB["command"]
        ),
        tf_config=replica["tf_config"],
        port=free_port(),
    )
    send_start(stack, start)
    wait_for(
        lambda: claimed(stack, node_b, job_id),
        60,
        "the second node to refuse the copy (its queue declared again, the claim held)",
    )

    final = wait_terminal(client, job_id, timeout=400)
    events = client.events(job_id)
    assert final["status"] == "succeeded", job_story(client, job_id)
    # Nothing about the wipe forces a restart: the gang trains through it.
    assert final["attempt"] == 1, job_story(client, job_id)
    transitions = [(e["attempt"], e["to_status"]) for e in events]
    assert len(transitions) == len(set(transitions)), transitions

    # Each replica started once, on node_a: one process each, reported before the wipe
    # and again after it (the agent re-reports what runs); node_b started nothing.
    started = started_before | starts(bus, job_id)
    assert {(a, i) for a, i, _node, _pid in started} == {(1, i) for i in range(JOB["replicas"])}, (
        started
    )
    assert len(started) == JOB["replicas"], started  # one pid per replica
    assert {node for _a, _i, node, _pid in started} == {node_a}, started

    # The gang stepped to the end; every point and log line each replica wrote is stored
    # as written, each point counted once in its rollup: the batches and lines the wipe
    # erased before the leader stored them were sent again (and a copy sent twice counted
    # once: the rollups add only newly stored points).
    steps = sorted(steps_seen(client, job_id, 1))
    assert steps == list(range(1, STEPS + 1)), (len(steps), steps[:3], steps[-3:])
    assert_nothing_lost(stack, job_id)

    # The lock was taken again, with a newer fencing token, and one scheduler leads.
    leading = {name: leading_token(stack, name) for name in ("scheduler", "scheduler-b")}
    assert [t for t in leading.values() if t is not None] == [
        max(tokens_led(stack, "scheduler") + tokens_led(stack, "scheduler-b"))
    ], leading
    assert max(t for t in leading.values() if t is not None) > led_before, leading
    record(
        fault,
        "every process notices the missing generation marker: replicas' points "
        "and log lines of the last 30 s are sent again, the agent declares its queue "
        "and claims its replicas again, the leader re-takes the lock and writes the "
        f"current attempts from SQL; job finished in attempt {final['attempt']}",
        None,
        restored_at - wiped_at,
        "nothing: every point and log line stored once, none missing; each replica "
        "started once, a copy of a start message refused by its claim",
    )


def test_flushall_mid_job_loses_nothing_and_starts_nothing_twice(make_stack, tmp_path) -> None:  # type: ignore[no-untyped-def]
    wipe_mid_job(make_stack, tmp_path, flushall, "Redis FLUSHALL mid-job (run_id unchanged)")


def test_an_empty_redis_in_its_place_loses_nothing_and_starts_nothing_twice(
    make_stack, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    wipe_mid_job(
        make_stack,
        tmp_path,
        replace_with_an_empty_server,
        "Redis replaced by an empty server on the same address mid-job",
    )
