"""parameter_server on two agents, for real: a chief, 2 workers, 1 ps and an evaluator train
to success with the evaluator's metrics arriving; a worker SIGKILLed mid-run is started
again alone (the job succeeds on attempt 1); the ps SIGKILLed restarts the gang, which
resumes from its checkpoint."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest

from cli.client import CohortClient
from cli.stack import Stack
from tests.e2e.conftest import wait_for, wait_terminal
from tests.faults.conftest import record, steps_seen

pytestmark = pytest.mark.e2e

ROLES = {"chief": 1, "worker": 2, "ps": 1, "evaluator": 1}  # c0 w1 w2 p3 e4
WORKER, PS, EVALUATOR = 1, 3, 4
STEPS = 30  # per epoch: under parameter_server the chief backs up at each epoch end


def ps_job(epochs: int, steps: int, **extra: Any) -> dict[str, Any]:
    return {"name": "ps", "strategy": "parameter_server", "roles": ROLES,
            "restart_policy": "on_failure", "max_restarts": 1,
            "hyperparameters": {"epochs": epochs, "steps_per_epoch": steps}, **extra}


def two_nodes(make_stack: Callable[..., tuple[Stack, CohortClient]], tmp_path: Any
              ) -> tuple[Stack, CohortClient]:
    # 3 + 3 slots: the gang of 5 spans both nodes (pack fills node-a, then node-b).
    stack, client = make_stack(slots=3, COHORT_EVALUATOR_GRACE="60")
    stack.add_agent("node-b", 3, data_dir=str(tmp_path / "data-node-b"))
    wait_for(lambda: len([n for n in client.nodes() if n["status"] == "ready"]) == 2, 60,
             "two ready nodes")
    return stack, client


def explain(client: CohortClient, job_id: int) -> list[tuple[str, str]]:
    return [(e["to_status"], e["reason"]) for e in client.events(job_id)]


def running_pid(client: CohortClient, job_id: int, index: int, after_step: int) -> int:
    """The pid of replica `index` once the chief has trained past `after_step`."""
    def ready() -> int | None:
        job = client.job(job_id)
        steps = steps_seen(client, job_id, job["attempt"])
        replica = next((r for r in job["replica_list"] if r["index"] == index), None)
        if steps and max(steps) >= after_step and replica and replica["pid"] and \
                replica["status"] == "running":
            return int(replica["pid"])
        return None
    return wait_for(ready, 240, f"the chief past step {after_step}", interval=0.5)


def test_ps_gang_trains_to_success_with_evaluator_metrics(make_stack, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _stack, client = two_nodes(make_stack, tmp_path)
    job = client.submit(ps_job(epochs=2, steps=STEPS))
    final = wait_terminal(client, job["id"], timeout=420)
    assert final["status"] == "succeeded", explain(client, job["id"])
    assert final["attempt"] == 1
    assert final["reason"].startswith("the chief exited 0")
    replicas = sorted(final["replica_list"], key=lambda r: r["index"])
    assert [(r["role"], r["role_index"]) for r in replicas] == [
        ("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0), ("evaluator", 0)]
    assert len({r["node_id"] for r in replicas}) == 2
    assert replicas[EVALUATOR]["node_id"] == replicas[0]["node_id"]
    assert replicas[0]["tf_config"]["task"] == {"type": "chief", "index": 0}
    assert replicas[EVALUATOR]["tf_config"]["cluster"] == {
        "evaluator": [replicas[EVALUATOR]["address"]]}
    evaluated = [p for p in client.metrics(job["id"], replica=EVALUATOR, limit=10_000)
                 if p["name"].startswith("eval_")]
    assert evaluated, "no eval_* metric from the evaluator"


def test_a_killed_worker_is_restarted_alone(make_stack, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _stack, client = two_nodes(make_stack, tmp_path)
    job = client.submit(ps_job(epochs=4, steps=STEPS))
    pid = running_pid(client, job["id"], WORKER, after_step=10)
    os.kill(pid, signal.SIGKILL)  # the worker's process, on whichever node
    killed_at = time.time()
    assert max(steps_seen(client, job["id"], 1)) < 4 * STEPS, "finished before the kill"
    restarted = wait_for(
        lambda: next((r for r in client.job(job["id"])["replica_list"]
                      if r["index"] == WORKER and r["restarts"] >= 1), None),
        120, "the worker started again")
    assert restarted["pid"] != pid and restarted["status"] == "running"
    back_at = time.time()
    final = wait_terminal(client, job["id"], timeout=420)
    assert final["status"] == "succeeded", explain(client, job["id"])
    assert final["attempt"] == 1  # no gang restart
    assert [e["to_status"] for e in client.events(job["id"])].count("restarting") == 0
    record("parameter_server worker SIGKILLed mid-run",
           "its agent started it again in place; the coordinator retried its work",
           None, back_at - killed_at, "job succeeded on attempt 1, no gang restart")


def test_a_killed_ps_restarts_the_gang_from_its_checkpoint(make_stack, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _stack, client = two_nodes(make_stack, tmp_path)
    job = client.submit(ps_job(epochs=4, steps=STEPS))
    pid = running_pid(client, job["id"], PS, after_step=STEPS + 5)  # past the first backup
    first = steps_seen(client, job["id"], 1)
    os.kill(pid, signal.SIGKILL)
    final = wait_terminal(client, job["id"], timeout=480)
    assert final["status"] == "succeeded", explain(client, job["id"])
    assert final["attempt"] == 2
    restarting = [e for e in client.events(job["id"]) if e["to_status"] == "restarting"]
    assert len(restarting) == 1 and "replica 3" in restarting[0]["reason"]
    second = steps_seen(client, job["id"], 2)
    # Resumed from the backup of a finished epoch, not from step 0.
    assert second and min(second) > STEPS, (min(second), max(first))
    assert max(second) == 4 * STEPS
