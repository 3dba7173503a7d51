"""Benchmark what a finished job's scaling report adds to `GET /api/v1/jobs/{id}`.

A 2-replica job and its 1-replica baseline, each of `--steps` steps of `step_time`
points stored through the ingest's own store (so the rollups are the real ones); then
(a) `read_scaling` as shipped, from the rollups, against (b) the same sums read from
the points themselves (what the report would cost without the rollups). Interleaved,
median of `--runs`, on PostgreSQL and on SQLite.

    .venv/bin/python bench/scaling.py --steps 100000

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.metrics import drop_pg, use  # noqa: E402
from cli.stack import migrate  # noqa: E402
from tests.conftest import create_database  # noqa: E402


def finished_job(project_id: int, replicas: int, steps: int) -> int:
    """A succeeded job of `replicas` replicas with `steps` step_time points each."""
    from services.db import session_scope
    from services.jobs import store as jobs
    from services.jobs.schemas import JobCreate
    from services.jobs.transitions import transition_job
    from services.settings import get_settings
    from services.statuses import JobStatus
    from services.telemetry import metrics

    with session_scope() as session:
        job, _ = jobs.create_job(
            session=session,
            project_id=project_id,
            settings=get_settings(),
            job_in=JobCreate(
                name=f"scaling-{replicas}", replicas=replicas, strategy="multi_worker_mirrored"
            ),
        )
        job_id = job.id
    chunk = 100_000
    rows = [
        {
            "job_id": job_id,
            "attempt": 1,
            "replica": r,
            "step": s,
            "epoch": 0,
            "name": "step_time",
            "value": 0.01 * replicas,
            "ts": float(s),
        }
        for r in range(replicas)
        for s in range(1, steps + 1)
    ]
    for first in range(0, len(rows), chunk):
        with session_scope() as session:
            metrics.insert_points(session=session, rows=rows[first : first + chunk])
    with session_scope() as session:
        for target in (JobStatus.SCHEDULED, JobStatus.RUNNING, JobStatus.SUCCEEDED):
            transition_job(session=session, job_id=job_id, target=target)
    return job_id


def from_points(session: sa.orm.Session, job_id: int) -> list[tuple[int, float, int]]:
    """Per replica: sum and count of the step_time points, from the points."""
    from services.models import MetricPoint

    return [
        tuple(row)
        for row in session.execute(  # type: ignore[misc]
            sa.select(MetricPoint.replica, sa.func.sum(MetricPoint.value), sa.func.count())
            .where(
                MetricPoint.job_id == job_id,
                MetricPoint.attempt == 1,
                MetricPoint.name == "step_time",
            )
            .group_by(MetricPoint.replica)
        ).all()
    ]


def bench(label: str, steps: int, runs: int) -> None:
    from services.auth import tokens
    from services.db import session_scope
    from services.models import Job
    from services.telemetry.scaling import read_scaling

    with session_scope() as session:
        project_id = tokens.ensure_token(
            session=session,
            token="bench_" + os.urandom(8).hex(),
            project_name="bench",
            name="bench",
            scopes=["read", "submit", "schedules"],
        ).project_id
    base_id = finished_job(project_id, 1, steps)
    job_id = finished_job(project_id, 2, steps)
    if label == "postgresql":
        with session_scope() as session:
            session.execute(sa.text("ANALYZE"))  # as autovacuum would
    times: dict[str, list[float]] = {"rollups": [], "points": []}
    report = None
    for _ in range(runs):
        started = time.perf_counter()
        with session_scope() as session:
            report = read_scaling(session=session, job=session.get_one(Job, job_id))
        times["rollups"].append(time.perf_counter() - started)
        started = time.perf_counter()
        with session_scope() as session:
            from_points(session, job_id)
            from_points(session, base_id)
        times["points"].append(time.perf_counter() - started)
    med = {way: statistics.median(got) * 1000 for way, got in times.items()}
    assert report is not None and report.baseline_job_id == base_id, report
    print(
        f"scaling {label}, 2 x {steps:,} + {steps:,} step_time points (median of {runs}): "
        f"(a) from the rollups {med['rollups']:.1f} ms; (b) sums from the points "
        f"{med['points']:.1f} ms; b/a {med['points'] / med['rollups']:.0f} "
        f"(efficiency {report.efficiency})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(f"{platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}")
    with tempfile.TemporaryDirectory() as tmp:
        name = f"cohort_bench_scaling_{os.getpid()}"
        use(create_database(name), "redis://127.0.0.1:1/0", tmp)
        migrate()
        try:
            bench("postgresql", args.steps, args.runs)
        finally:
            drop_pg(name)
        use(f"sqlite:///{tmp}/bench.db", "redis://127.0.0.1:1/0", tmp)
        migrate()
        bench("sqlite", args.steps, args.runs)


if __name__ == "__main__":
    main()
