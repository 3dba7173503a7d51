"""Agents whose clocks are five minutes ahead and five minutes behind (libfaketime, for
real: the agents and the replicas they run read a skewed clock): liveness is judged on
the control plane's clock (services/cluster/arrivals.py) and signed messages on Redis's
(services/wire/clock.py), so neither node is ever lost, no replica is hung, and a gang
spanning both nodes trains to the end.

A replica inherits only an allow-list of its agent's environment (no LD_PRELOAD), so the
node runs its replicas with an interpreter that is skewed as well (COHORT_REPLICA_PYTHON,
a script that sets the clock and execs Python), as on a host whose clock is off. The
replicas are steppers (tests/e2e/stepper.py): what is judged is their reports' times."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from services.wire.keys import NODES_HASH
from services.wire.signing import Sealed
from tests.capabilities import need_libfaketime
from tests.e2e.conftest import job_story, wait_for, wait_terminal
from tests.e2e.stepper import stepping_job
from tests.faults.conftest import record
from tests.faults.nothing_lost import assert_nothing_lost

pytestmark = [pytest.mark.e2e, pytest.mark.slow(30)]

SKEWS = {"node-ahead": 300.0, "node-behind": -300.0}  # seconds off the real clock
# 15 s: a few NODE_TIMEOUTs (6 s) of the fault suite, and past the first progress check.
JOB: dict[str, Any] = stepping_job(
    300, 0.05, name="skewed", replicas=2, placement="spread", restart_policy="never"
)


def skewed(seconds: float) -> dict[str, str]:
    """The environment that sets a process's clock (and its children's) `seconds` off."""
    return {
        "LD_PRELOAD": str(need_libfaketime()),
        "FAKETIME": f"{seconds:+.0f}",
        # Python's and Celery's timers run on the monotonic clock: left alone, as a
        # host's clock being wrong does not make its timers wrong.
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


def skewed_python(directory: Path, seconds: float) -> Path:
    """An interpreter for replicas whose clock is `seconds` off (others may run it)."""
    script = directory / f"python{seconds:+.0f}"
    exports = " ".join(f"{name}={value}" for name, value in skewed(seconds).items())
    script.write_text(f'#!/bin/sh\nexport {exports}\nexec {sys.executable} "$@"\n')
    script.chmod(0o755)
    return script


def heartbeat_skew(bus: redis.Redis, node_id: str) -> float | None:
    """How far the time an agent wrote on its last heartbeat is from the real one."""
    raw = bus.hget(NODES_HASH, node_id)
    return None if raw is None else Sealed.decode(raw).ts - time.time()


class NodeWatch(threading.Thread):
    """Reads the nodes every 0.2 s while the job runs: any status but ready is kept."""

    def __init__(self, client: Any) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.seen: set[tuple[str, str]] = set()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.2):
            self.seen |= {(n["id"], n["status"]) for n in self.client.nodes()}


def test_agents_five_minutes_ahead_and_behind_stay_ready_and_their_gang_succeeds(
    make_stack, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    # The stack's own agent (true clock) offers no slot: the gang must go to the others.
    # A clock judged by the sender's time would show a silence of 300 s at once, which
    # the fault suite's progress timeout (20 s) catches.
    stack, client = make_stack(slots=0)
    for node_id, seconds in SKEWS.items():
        stack.add_agent(
            node_id, 1, env=skewed(seconds), replica_python=str(skewed_python(tmp_path, seconds))
        )
    wait_for(
        lambda: {n["id"] for n in client.nodes() if n["status"] == "ready"} >= set(SKEWS),
        60,
        "the skewed agents to register",
    )
    bus = redis.Redis.from_url(stack.settings.redis_url, decode_responses=True)
    for node_id, seconds in SKEWS.items():  # the clocks are really off
        skew = heartbeat_skew(bus, node_id)
        assert skew is not None and abs(skew - seconds) < 10, (node_id, skew)

    watch = NodeWatch(client)
    watch.start()
    started = time.time()
    job = client.submit(JOB)
    final = wait_terminal(client, job["id"], timeout=300)
    watch.done.set()
    watch.join()

    events = client.events(job["id"])
    assert final["status"] == "succeeded", job_story(client, job["id"])
    # Never restarted: no node lost, no replica hung.
    assert final["attempt"] == 1, job_story(client, job["id"])
    assert not [
        e["reason"]
        for e in events
        if "hung" in (e["reason"] or "") or "lost" in (e["reason"] or "")
    ]
    assert {r["node_id"] for r in final["replica_list"]} == set(SKEWS)
    assert {r["status"] for r in final["replica_list"]} == {"succeeded"}
    # Both nodes ready at every read while the gang ran, and after.
    assert {status for node_id, status in watch.seen if node_id in SKEWS} == {"ready"}
    assert {n["id"]: n["status"] for n in client.nodes()}.keys() >= set(SKEWS)
    # The replicas ran on their agent's clock too: the chief's metric points are stamped
    # with its node's skewed time.
    chief = next(r for r in final["replica_list"] if r["index"] == 0)
    points = client.metrics(job["id"], name=["loss"], replica=0, limit=100_000)
    assert points
    offset = points[-1]["ts"] - time.time()
    assert abs(offset - SKEWS[chief["node_id"]]) < 120, (chief["node_id"], offset)
    assert_nothing_lost(stack, job["id"])
    record(
        "agent clocks 5 min ahead and 5 min behind (libfaketime)",
        "liveness judged by when the scheduler saw each beat arrive, signed messages by "
        "Redis's TIME: both nodes ready throughout, no replica hung, the gang across both "
        f"succeeded in attempt 1 ({time.time() - started:.0f} s)",
        None,
        None,
        "nothing",
    )
