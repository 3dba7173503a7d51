"""Metrics downsampling, progress on GET /jobs/{id}, logs, and Prometheus /metrics."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from services.jobs.transitions import transition_job
from services.models import MetricPoint
from services.statuses import JobStatus
from services.telemetry import logs, metrics
from tests.factories import create_job, create_token


def _points(
    job_id: int,
    steps: int,
    names: tuple[str, ...] = ("loss",),
    replica: int = 0,
    rate: float = 10.0,
) -> list[dict[str, Any]]:
    return [
        {
            "job_id": job_id,
            "attempt": 1,
            "replica": replica,
            "step": s,
            "epoch": 0,
            "name": n,
            "value": float(s),
            "ts": 1000.0 + s / rate,
        }
        for s in range(1, steps + 1)
        for n in names
    ]


def test_downsampling_keeps_each_series_share(client: TestClient, session: Session) -> None:
    token, row = create_token(session)
    job = create_job(session, row.project_id, replicas=2)
    metrics.store_points(session=session, rows=_points(job.id, 10_000, ("loss", "accuracy")))
    metrics.store_points(session=session, rows=_points(job.id, 50, replica=1))
    url, auth = f"/api/v1/jobs/{job.id}/metrics", {"Authorization": f"Bearer {token}"}
    answer = client.get(url, params={"max_points": 300}, headers=auth).json()
    items = answer["items"]
    # Where the live stream goes on from: the newest point of the job when it was read.
    newest = session.execute(
        sa.select(sa.func.max(MetricPoint.id)).where(MetricPoint.job_id == job.id)
    ).scalar_one()
    assert answer["last_id"] == newest
    assert client.get(url, headers=auth).json()["last_id"] is None  # plain reads: none
    by_series: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for p in items:
        by_series.setdefault((p["replica"], p["name"]), []).append(p)
    assert len(by_series[(1, "loss")]) == 50  # a short series comes back whole
    loss = by_series[(0, "loss")]
    assert 50 <= len(loss) <= 100 and loss[-1]["step"] == 10_000
    assert [p["step"] for p in loss] == sorted(p["step"] for p in loss)
    # Each point is its bucket's mean: values stay on the line value == step.
    assert all(abs(p["value"] - p["step"]) <= 10_000 / len(loss) for p in loss)
    # Read from the rollups: the budget of 100 buckets over steps 0..10,000 gives a
    # width of 101, rounded up to whole 100-step rollups: 200; the means are exact.
    buckets = [range(max(1, b * 200), min(10_000, b * 200 + 199) + 1) for b in range(51)]
    assert [p["step"] for p in loss] == [b[-1] for b in buckets]
    assert [p["value"] for p in loss] == pytest.approx([sum(b) / len(b) for b in buckets])
    few = client.get(
        url, params={"max_points": 300, "name": "loss", "replica": 1}, headers=auth
    ).json()["items"]
    assert [p["step"] for p in few] == list(range(1, 51))
    bad = client.get(url, params={"max_points": 1}, headers=auth)
    assert bad.status_code == 422 and "max_points" in bad.json()["message"]


def test_a_sparse_series_among_dense_ones_comes_back_whole(
    client: TestClient, session: Session
) -> None:
    """An epoch metric (a point every 1,000 steps, and twice in one bucket) beside a
    per-step one: returned whole, every point exact, nothing of the dense series mixed in."""
    token, row = create_token(session)
    job = create_job(session, row.project_id, replicas=2)
    metrics.store_points(session=session, rows=_points(job.id, 20_000, ("loss", "acc")))
    sparse = [*range(1000, 20_001, 1000), 5010, 5020]
    metrics.store_points(
        session=session,
        rows=[
            {
                "job_id": job.id,
                "attempt": 1,
                "replica": 0,
                "step": s,
                "epoch": s // 1000,
                "name": "epoch_loss",
                "value": s / 7,
                "ts": 2000.0 + s,
            }
            for s in sparse
        ],
    )
    url, auth = f"/api/v1/jobs/{job.id}/metrics", {"Authorization": f"Bearer {token}"}
    items = client.get(
        url, params={"max_points": 1000, "name": ["loss", "epoch_loss"]}, headers=auth
    ).json()["items"]
    epoch = [p for p in items if p["name"] == "epoch_loss"]
    assert [(p["step"], p["value"], p["epoch"]) for p in epoch] == [
        (s, s / 7, s // 1000) for s in sorted(sparse)
    ]
    assert {p["name"] for p in items} == {"loss", "epoch_loss"}
    assert 200 <= sum(p["name"] == "loss" for p in items) <= 500


def test_progress_and_eta(client: TestClient, session: Session) -> None:
    token, row = create_token(session)
    job = create_job(session, row.project_id, hyperparameters={"epochs": 4, "steps_per_epoch": 25})
    auth = {"Authorization": f"Bearer {token}"}
    empty = client.get(f"/api/v1/jobs/{job.id}", headers=auth).json()["progress"]
    assert empty["step"] == 0 and empty["percent"] == 0 and empty["eta_seconds"] is None
    for target in (JobStatus.SCHEDULED, JobStatus.RUNNING):
        transition_job(session=session, job_id=job.id, target=target)
    metrics.store_points(session=session, rows=_points(job.id, 30, ("step_time", "loss")))
    progress = client.get(f"/api/v1/jobs/{job.id}", headers=auth).json()["progress"]
    assert progress["step"] == 30 and progress["total_steps"] == 100
    assert progress["epoch"] == 2 and progress["epochs"] == 4 and progress["percent"] == 30.0
    assert progress["steps_per_second"] == 10.0 and progress["eta_seconds"] == 7.0


@pytest.mark.parametrize(
    "spec",
    [
        {"command": ["python", "train.py"]},
        # A command's own epochs are its script's business: it reports its steps.
        {"command": ["python", "train.py"], "hyperparameters": {"epochs": 3}},
        {"trainer": "trainer:train", "bundle": "sha256:" + "0" * 64},
    ],
    ids=["command", "command-with-epochs", "own-trainer-without-length"],
)
def test_progress_of_a_job_of_unknown_length_is_what_it_reported(
    client: TestClient, session: Session, spec: dict[str, Any]
) -> None:
    from services.models import Bundle

    token, row = create_token(session)
    if "bundle" in spec:  # as if uploaded: the trainer is the job's own code
        session.add(Bundle(project_id=row.project_id, digest=spec["bundle"], size=1, files=1))
        session.flush()
    job = create_job(session, row.project_id, **spec)
    auth = {"Authorization": f"Bearer {token}"}
    body = client.get(f"/api/v1/jobs/{job.id}", headers=auth).json()
    assert body["hyperparameters"] == spec.get("hyperparameters", {})  # no defaults shown
    assert body["progress"] == {
        "step": 0,
        "total_steps": None,
        "epoch": None,
        "epochs": None,
        "percent": None,
        "steps_per_second": None,
        "eta_seconds": None,
    }
    for target in (JobStatus.SCHEDULED, JobStatus.RUNNING):
        transition_job(session=session, job_id=job.id, target=target)
    points = _points(job.id, 30, ("loss",))  # cohort.report(step, loss=...): no step_time
    for p in points:
        p["epoch"] = None
    metrics.store_points(session=session, rows=points)
    progress = client.get(f"/api/v1/jobs/{job.id}", headers=auth).json()["progress"]
    assert progress == {**progress, "step": 30, "total_steps": None, "percent": None}
    assert progress["epoch"] is None and progress["eta_seconds"] is None
    assert progress["steps_per_second"] == 10.0
    transition_job(session=session, job_id=job.id, target=JobStatus.SUCCEEDED)
    done = client.get(f"/api/v1/jobs/{job.id}", headers=auth).json()["progress"]
    assert done["step"] == 30 and done["total_steps"] is None  # not a made-up 100/100


def test_progress_carries_the_epoch_a_command_reported(
    client: TestClient, session: Session
) -> None:
    token, row = create_token(session)
    job = create_job(session, row.project_id, command=["python", "train.py"])
    metrics.store_points(session=session, rows=_points(job.id, 12, ("epoch_loss",)))
    auth = {"Authorization": f"Bearer {token}"}
    progress = client.get(f"/api/v1/jobs/{job.id}", headers=auth).json()["progress"]
    assert (progress["step"], progress["epoch"], progress["epochs"]) == (12, 1, None)


def test_logs_tail_and_filters(client: TestClient, session: Session) -> None:
    token, row = create_token(session)
    job = create_job(session, row.project_id)
    rows = [
        {
            "job_id": job.id,
            "attempt": a,
            "replica": r,
            "seq": i,
            "ts": 100.0 * a + i,
            "line": f"a{a} r{r} {i}",
        }
        for a in (1, 2)
        for r in (0, 1)
        for i in range(1, 6)
    ]
    assert len(logs.insert_lines(session=session, rows=rows)) == 20
    assert logs.insert_lines(session=session, rows=rows) == []
    url, auth = f"/api/v1/jobs/{job.id}/logs", {"Authorization": f"Bearer {token}"}
    tail = client.get(url, params={"replica": 1, "attempt": 1, "tail": 2}, headers=auth).json()
    assert [i["line"] for i in tail["items"]] == ["a1 r1 4", "a1 r1 5"]
    assert len(client.get(url, headers=auth).json()["items"]) == 20
    assert client.get(url, params={"tail": 0}, headers=auth).status_code == 422
    other, _ = create_token(session, "elsewhere")
    assert client.get(url, headers={"Authorization": f"Bearer {other}"}).status_code == 404
