"""Contention, for real: two agents with 2 slots each, 8 gangs of 1-4 replicas with mixed
priorities submitted at once. Every job succeeds, none is ever partially placed, no node
ever runs more replicas than it has slots, and priority order holds.

The replicas are steppers (tests/e2e/stepper.py), about 3 s each: placement is what this
tests, and 20 TensorFlow replicas cost over a minute of the suite's two cores."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from cli.stack import Stack
from cohort.client import Client
from tests.e2e.multinode import (
    scheduled_events,
    start_agent,
    stop_agent,
    wait_all_terminal,
    wait_nodes,
    when,
)
from tests.e2e.stepper import stepping_job

pytestmark = [pytest.mark.e2e, pytest.mark.slow(40)]

# (replicas, priority): 20 replicas in all on 4 slots, every size at every priority but
# one; the biggest gangs need both nodes, so a small one must not slip past them.
GANGS = [(4, 0), (1, 0), (2, 1), (3, 0), (1, 2), (4, 2), (2, 2), (3, 1)]
STEPS, STEP_SECONDS = 60, 0.05


@pytest.fixture
def two_nodes(pg_stack: tuple[Stack, Client], tmp_path: Path) -> Iterator[tuple[Stack, Client]]:
    stack, client = pg_stack
    agent = start_agent(stack.env, "e2e-node-b", 2, tmp_path / "node-b")
    try:
        wait_nodes(client, {"e2e-node", "e2e-node-b"})
        yield stack, client
    finally:
        stop_agent(agent)


def test_eight_gangs_on_two_nodes(two_nodes: tuple[Stack, Client]) -> None:
    _stack, client = two_nodes
    specs = [
        stepping_job(STEPS, STEP_SECONDS, name=f"gang-{i}", replicas=replicas, priority=priority)
        for i, (replicas, priority) in enumerate(GANGS)
    ]
    with ThreadPoolExecutor(max_workers=len(GANGS)) as pool:
        submitted = list(pool.map(client.submit, specs))
    ids = [job["id"] for job in submitted]
    jobs = wait_all_terminal(client, ids, timeout=900)

    failed = {
        j: (job["status"], job["reason"]) for j, job in jobs.items() if job["status"] != "succeeded"
    }
    assert not failed

    placed: dict[int, dict[str, Any]] = {}
    for job_id, job in jobs.items():
        # Never partial: one placement of the whole gang, every replica at once.
        events = scheduled_events(client, job_id)
        assert len(events) == 1, events
        assert events[0]["reason"].startswith(f"placed {job['replicas']} replicas on ")
        replicas = job["replica_list"]
        assert sorted(r["index"] for r in replicas) == list(range(job["replicas"]))
        placed[job_id] = {"at": when(events[0]["created_at"]), "job": job}

    # No node ever ran more replicas than its 2 slots.
    for node in ("e2e-node", "e2e-node-b"):
        edges = []
        for entry in placed.values():
            for r in entry["job"]["replica_list"]:
                if r["node_id"] == node:
                    edges += [(when(r["started_at"]), 1), (when(r["finished_at"]), -1)]
        load = peak = 0
        for _, step in sorted(edges, key=lambda e: (e[0], e[1])):  # exits before starts
            load += step
            peak = max(peak, load)
        assert peak <= 2, f"{node} ran {peak} replicas at once"

    # A higher-priority job never started after a lower-priority one that was queued
    # later than it was and needed the same or more slots. "Queued earlier" leaves a
    # margin of a second for a pass that had read the queue just before a submission.
    for high in placed.values():
        for low in placed.values():
            h, lo = high["job"], low["job"]
            if h["priority"] <= lo["priority"] or lo["replicas"] < h["replicas"]:
                continue
            if when(h["created_at"]) < low["at"] - 1.0:
                assert high["at"] <= low["at"], (
                    f"job {h['id']} (priority {h['priority']}) started after job {lo['id']} "
                    f"(priority {lo['priority']}), queued while it waited"
                )
