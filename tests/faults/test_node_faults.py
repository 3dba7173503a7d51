"""A node agent killed mid-job, and a cancel that must reach every replica on every node."""

from __future__ import annotations

import time

import pytest

from tests.e2e.conftest import wait_for, wait_terminal
from tests.faults.conftest import LONG_JOB, alive, event_time, record, steps_seen

pytestmark = pytest.mark.e2e


def test_killed_agent_job_restarts_elsewhere(make_stack) -> None:  # type: ignore[no-untyped-def]
    stack, client = make_stack(slots=2)
    stack.add_agent("node-b", 2)
    wait_for(lambda: len([n for n in client.nodes() if n["status"] == "ready"]) == 2, 60,
             "two ready nodes")
    job = client.submit(LONG_JOB)
    wait_for(lambda: max(steps_seen(client, job["id"], 1) or [0]) >= 50, 120, "training")
    first = client.job(job["id"])
    node = first["replica_list"][0]["node_id"]
    assert {r["node_id"] for r in first["replica_list"]} == {node}  # packed on one node
    killed_at = time.time()
    stack.kill("agent" if node == "node-a" else "agent-node-b")

    # Its replicas notice their agent is gone and stop: no second copy of the gang.
    pids = [r["pid"] for r in first["replica_list"]]
    wait_for(lambda: not any(alive(p) for p in pids), 15, "the orphaned replicas to stop")
    final = wait_terminal(client, job["id"])
    events = client.events(job["id"])
    assert final["status"] == "succeeded", [(e["to_status"], e["reason"]) for e in events]
    assert final["attempt"] == 2
    other = "node-b" if node == "node-a" else "node-a"
    assert {r["node_id"] for r in final["replica_list"]} == {other}
    restarting = event_time(client, job["id"], "restarting")
    rescheduled = event_time(client, job["id"], "scheduled", attempt=2)
    assert restarting is not None and rescheduled is not None
    reason = next(e["reason"] for e in events if e["to_status"] == "restarting")
    assert f"node {node} stopped answering" in reason
    # The bound: placed again within 30 s of the last heartbeat.
    assert rescheduled - killed_at < 30
    second = steps_seen(client, job["id"], 2)
    first_step_2 = min(p["ts"] for p in client.metrics(job["id"], attempt=2, name=["loss"],
                                                       replica=0) if p["step"] == min(second))
    redone = max(steps_seen(client, job["id"], 1)) - (min(second) - 1)
    record("node agent killed (SIGKILL)", "its replicas stop themselves (parent gone); node "
           "marked lost after 6 s without heartbeat; gang placed on the other node, resumed "
           "from checkpoint", restarting - killed_at, first_step_2 - killed_at,
           f"{redone} steps redone (since the last epoch end)")


def test_cancel_reaches_every_replica_on_every_node(make_stack) -> None:  # type: ignore[no-untyped-def]
    stack, client = make_stack(slots=1)
    stack.add_agent("node-b", 1)
    wait_for(lambda: len([n for n in client.nodes() if n["status"] == "ready"]) == 2, 60,
             "two ready nodes")
    job = client.submit({**LONG_JOB, "hyperparameters": {"epochs": 100,
                                                          "steps_per_epoch": 100}})
    running = wait_for(lambda: (j := client.job(job["id"]))["status"] == "running" and j, 120,
                       "the job to run")
    assert {r["node_id"] for r in running["replica_list"]} == {"node-a", "node-b"}
    pids = [r["pid"] for r in running["replica_list"]]
    cancelled_at = time.time()
    client.cancel(job["id"])
    wait_for(lambda: not any(alive(p) for p in pids), 10, "every replica process to exit")
    gone = time.time() - cancelled_at
    final = wait_for(lambda: (j := client.job(job["id"])) and all(
        r["status"] == "stopped" for r in j["replica_list"]) and j, 15, "replicas recorded")
    assert final["status"] == "cancelled"
    assert all(r["exit_code"] is not None for r in final["replica_list"])
    record("cancel of a running 2-node job", "SIGTERM to each replica's process group on "
           "both nodes (SIGKILL after the grace period)", None, gone, "nothing (cancelled)")
