"""End to end: a 2-replica MultiWorkerMirroredStrategy job over REST, trained for real."""

from __future__ import annotations

import collections
import json
from typing import Any

import psutil
import pytest

from cli.stack import Stack
from cohort.client import Client
from tests.e2e.conftest import wait_terminal

JOB = {
    "name": "e2e-digits",
    "trainer": "mlp_digits",
    "strategy": "multi_worker_mirrored",
    "replicas": 2,
    "hyperparameters": {"epochs": 5, "steps_per_epoch": 20},
}


def check_two_replica_job(stack: Stack, client: Client) -> None:
    submitted = client.submit(JOB, idempotency_key="e2e-1")
    job = wait_terminal(client, submitted["id"])
    assert job["status"] == "succeeded", job["reason"]
    assert job["reason"] == "all 2 replicas exited 0"

    # The gang: indices 0 and 1, one cluster list shared by both, distinct ports.
    replicas = job["replica_list"]
    assert [r["index"] for r in replicas] == [0, 1]
    assert all(r["status"] == "succeeded" and r["exit_code"] == 0 for r in replicas)
    clusters = [r["tf_config"]["cluster"]["worker"] for r in replicas]
    assert clusters[0] == clusters[1] == [r["address"] for r in replicas]
    assert len(set(clusters[0])) == 2
    assert [r["tf_config"]["task"] for r in replicas] == [
        {"type": "worker", "index": 0},
        {"type": "worker", "index": 1},
    ]

    # What each process really received, from its own log.
    for replica in replicas:
        log = (
            stack.settings.data_dir
            / "jobs"
            / str(job["id"])
            / "logs"
            / "attempt-1"
            / f"replica-{replica['index']}.log"
        ).read_text()
        line = next(ln for ln in log.splitlines() if ln.startswith("cohort: replica "))
        received = json.loads(line.split("TF_CONFIG=", 1)[1])
        assert received == replicas[replica["index"]]["tf_config"]
        assert "num_replicas_in_sync=2" in log

    points = client.metrics(job["id"], limit=100_000)
    keys = [(p["attempt"], p["replica"], p["step"], p["name"]) for p in points]
    duplicates = [k for k, n in collections.Counter(keys).items() if n > 1]
    assert not duplicates
    assert {p["replica"] for p in points} == {0, 1}

    evals = {
        p["name"]: p["value"] for p in points if p["replica"] == 0 and p["name"].startswith("eval_")
    }
    assert evals["eval_accuracy"] >= 0.85, evals

    loss = sorted(
        (p["step"], p["value"]) for p in points if p["replica"] == 0 and p["name"] == "loss"
    )
    assert len(loss) == 100
    # One replica's view of the running mean, not a sum over the gang: a 10-class
    # model starts near ln(10) = 2.3, and accuracy stays a fraction.
    assert 1.5 < loss[0][1] < 3.5, loss[0]
    assert all(0.0 <= p["value"] <= 1.0 for p in points if p["name"].endswith("accuracy"))
    first = sum(v for _, v in loss[:5]) / 5
    last = sum(v for _, v in loss[-5:]) / 5
    assert last < first * 0.5, (first, last)

    # The chief saved the model; no replica process is left behind.
    assert (stack.settings.data_dir / "jobs" / str(job["id"]) / "model").exists()
    assert not [
        r["pid"]
        for r in replicas
        if psutil.pid_exists(r["pid"]) and psutil.Process(r["pid"]).status() != psutil.STATUS_ZOMBIE
    ]

    # Its scaling report, from its own step times; no 1-replica run to compare with
    # (tests/e2e/test_sweep_scaling.py has one).
    scaling = job["scaling"]
    assert scaling["total_examples_per_second"] > 0
    assert scaling["total_examples_per_second"] == pytest.approx(
        2 * scaling["per_replica_examples_per_second"], rel=0.01
    )
    assert scaling["baseline_job_id"] is None and scaling["efficiency"] is None
    assert "no succeeded 1-replica run of mlp_digits at batch 32" in scaling["note"]


@pytest.mark.e2e
def test_two_replica_job_on_postgres(module_stack: tuple[Stack, Client]) -> None:
    check_two_replica_job(*module_stack)


@pytest.mark.e2e
def test_two_replica_job_on_embedded_defaults(embedded_stack: tuple[Stack, Client]) -> None:
    stack, client = embedded_stack
    check_two_replica_job(stack, client)
    assert (stack.settings.data_dir / "cohort.db").exists()


@pytest.mark.e2e
def test_cancel_stops_every_replica(module_stack: tuple[Stack, Client]) -> None:
    stack, client = module_stack
    job = client.submit(
        {**JOB, "name": "long", "hyperparameters": {"epochs": 200, "steps_per_epoch": 50}}
    )
    from tests.e2e.conftest import wait_for

    running = wait_for(
        lambda: (j := client.job(job["id"]))["status"] == "running" and j, 60, "the job to run"
    )
    pids = [r["pid"] for r in running["replica_list"]]
    assert all(psutil.pid_exists(p) for p in pids)
    client.cancel(job["id"])
    wait_for(
        lambda: (
            not any(
                psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                for p in pids
            )
        ),
        15,
        "replicas to exit",
    )
    final = wait_for(
        lambda: (
            (j := client.job(job["id"]))
            and all(r["status"] == "stopped" for r in j["replica_list"])
            and j
        ),
        15,
        "replicas stopped",
    )
    assert final["status"] == "cancelled"
    assert [r["exit_code"] for r in final["replica_list"]] != [None, None]


@pytest.mark.e2e
def test_failing_job_says_why(module_stack: tuple[Stack, Client]) -> None:
    _, client = module_stack
    # The api checks every knob it knows; the user's own code fails as it pleases, and
    # the failure must surface as a readable reason.
    job = client.submit(
        {
            "name": "broken",
            "strategy": "multi_worker_mirrored",
            "replicas": 2,
            "command": ["python", "-c", "raise SystemExit('out of ideas')"],
        }
    )
    final: dict[str, Any] = wait_terminal(client, job["id"])
    assert final["status"] == "failed"
    assert "exited with code 1" in final["reason"], final["reason"]
