"""End to end: with COHORT_MLFLOW_TRACKING_URI set, a 2-replica job run through the real
stack (api, scheduler, agent) becomes an MLflow run on a real `mlflow server`, read back
through MLflow's REST API: its params, every point of both replicas that Cohort stored,
its tags and its end.

No TensorFlow: the replicas are the stepper's few lines of Python (tests/e2e/stepper.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import pg_stack_with, wait_for, wait_terminal
from tests.e2e.stepper import stepping_job
from tests.mlflowserver import MlflowServer


def rest(server: MlflowServer, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
    response = httpx.request(method, f"{server.uri}/api/2.0/mlflow/{path}", timeout=10, **kwargs)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def finished_run(server: MlflowServer, experiment: str, job_id: int) -> dict[str, Any] | None:
    """The job's run once it has ended (None before)."""
    found = httpx.get(
        f"{server.uri}/api/2.0/mlflow/experiments/get-by-name",
        params={"experiment_name": experiment},
        timeout=10,
    )
    if found.status_code != 200:
        return None
    runs = rest(
        server,
        "POST",
        "runs/search",
        json={
            "experiment_ids": [found.json()["experiment"]["experiment_id"]],
            "filter": f"tags.`cohort.job_id` = '{job_id}'",
        },
    ).get("runs", [])
    assert len(runs) <= 1, runs
    return runs[0] if runs and runs[0]["info"]["status"] != "RUNNING" else None


@pytest.mark.e2e
def test_a_job_becomes_an_mlflow_run_with_every_point_of_every_replica(
    tmp_path: Path, mlflow_server: MlflowServer
) -> None:
    env = {
        "COHORT_MLFLOW_TRACKING_URI": mlflow_server.uri,
        "COHORT_MLFLOW_EXPORT_INTERVAL": "0.3",
    }
    with pg_stack_with(tmp_path, env) as (_stack, client):
        spec = stepping_job(
            30,
            name="tracked",
            strategy="multi_worker_mirrored",
            replicas=2,
            hyperparameters={"learning_rate": 0.05, "optimizer": {"name": "sgd"}},
        )
        job = client.submit(spec)
        assert wait_terminal(client, job["id"], timeout=120)["status"] == "succeeded"
        run = wait_for(
            lambda: finished_run(mlflow_server, "default", job["id"]), 30, "the run's end"
        )
        stored = client.metrics(job["id"], limit=100_000)
        events = [e["reason"] for e in client.events(job["id"])]

    assert run["info"]["status"] == "FINISHED" and run["info"]["run_name"] == f"tracked-{job['id']}"
    params = {p["key"]: p["value"] for p in run["data"]["params"]}
    assert params["learning_rate"] == "0.05" and params["optimizer.name"] == "sgd"
    assert params["cohort.strategy"] == "multi_worker_mirrored"
    assert params["cohort.replicas"] == "2" and params["cohort.command"].startswith('["python"')
    tags = {t["key"]: t["value"] for t in run["data"]["tags"]}
    assert tags["cohort.job_id"] == str(job["id"]) and tags["cohort.project"] == "default"
    assert (tags["cohort.status"], tags["cohort.replicas"]) == ("succeeded", "2")
    assert tags["cohort.model_uri"].endswith(f"/artifacts/jobs/{job['id']}/model")

    # Every point Cohort stored, once, under its replica's key: replica 0's as the run's own.
    expected = sorted(
        (
            p["name"] if p["replica"] == 0 else f"replica_{p['replica']}/{p['name']}",
            p["step"],
            p["value"],
            int(p["ts"] * 1000),
        )
        for p in stored
    )
    assert {key for key, *_ in expected} == {
        "loss",
        "accuracy",
        "replica_1/loss",
        "replica_1/accuracy",
    }
    got = sorted(
        (m["key"], int(m["step"]), m["value"], int(m["timestamp"]))
        for key in {m["key"] for m in run["data"]["metrics"]}
        for m in rest(
            mlflow_server,
            "GET",
            "metrics/get-history",
            params={"run_id": run["info"]["run_id"], "metric_key": key, "max_results": 25000},
        )["metrics"]
    )
    assert got == expected and len(expected) == 2 * 30 * 2
    assert not [e for e in events if "MLflow" in e], events  # no export failed
