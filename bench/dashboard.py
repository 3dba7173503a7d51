"""Cost of the dashboard's jobs table as the metric table grows.

A jobs page shows 25 jobs with their last loss and accuracy, and every open page
refreshes it every few seconds. This measures, on PostgreSQL, for 25 two-replica jobs
with P metric points each:

(a) `GET /api/v1/jobs?limit=25` (the REST list, no metrics): the floor;
(b) `GET /partials/jobs` (the live table, with last loss/accuracy per job);
(c) the last-metrics query alone, as shipped (`services.telemetry.summaries.read_last_metrics`);
(d) the first version of that query (a GROUP BY over every point of the 25 jobs), kept
    here for comparison.

Runs are interleaved (a, b, c, d, a, …) so machine noise hits all alike.

    .venv/bin/python bench/summaries.py [--steps 2000] [--runs 20]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import create_database, drop_database  # noqa: E402

NAMES = ("loss", "accuracy", "step_time", "examples_per_sec", "epoch_loss")


def old_last_metrics(session: sa.orm.Session, jobs: list) -> dict:
    from services.models import MetricPoint as M

    ids = [j.id for j in jobs]
    top = (
        sa.select(M.job_id, M.attempt, M.name, sa.func.max(M.step).label("step"))
        .where(M.job_id.in_(ids), M.name.in_(("loss", "accuracy")))
        .group_by(M.job_id, M.attempt, M.name)
        .subquery()
    )
    rows = session.execute(
        sa.select(M.job_id, M.name, sa.func.avg(M.value))
        .join(
            top,
            sa.and_(
                M.job_id == top.c.job_id,
                M.attempt == top.c.attempt,
                M.name == top.c.name,
                M.step == top.c.step,
            ),
        )
        .group_by(M.job_id, M.name)
    ).all()
    return {(j, n): v for j, n, v in rows}


def fill(url: str, jobs: int, steps: int) -> str:
    os.environ["COHORT_DATABASE_URL"] = url
    from services.db import session_scope
    from services.models import MetricPoint
    from tests.factories import create_job, create_token

    with session_scope() as session:
        token, row = create_token(session, "bench")
        project_id = row.project_id
        for _ in range(jobs):
            job = create_job(session, project_id, name="bench", replicas=2)
            session.flush()
            rows = [
                {
                    "job_id": job.id,
                    "attempt": 1,
                    "replica": r,
                    "step": s,
                    "epoch": 0,
                    "name": n,
                    "value": 1.0 / s,
                    "ts": 0.0,
                }
                for r in range(2)
                for s in range(1, steps + 1)
                for n in NAMES
            ]
            session.execute(sa.insert(MetricPoint), rows)
    return token


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    name = f"cohort_bench_dashboard_{os.getpid()}"
    url = create_database(name)
    try:
        token = fill(url, 25, args.steps)
        from fastapi.testclient import TestClient

        from api.main import create_app
        from services.db import session_scope
        from services.jobs import store as jobs
        from services.telemetry import summaries

        client = TestClient(create_app())
        assert (
            client.post("/login", data={"token": token}, follow_redirects=False).status_code == 303
        )
        auth = {"Authorization": f"Bearer {token}"}
        with session_scope() as session:
            rows = jobs.list_jobs(session=session, project_id=1, limit=25)[0]
            assert len(old_last_metrics(session, rows)) == 50
            assert len(summaries.read_last_metrics(session=session, jobs=rows)) == 25

        def rest() -> None:
            assert client.get("/api/v1/jobs?limit=25", headers=auth).status_code == 200

        def table() -> None:
            assert "bench" in client.get("/partials/jobs").text

        def query(fn) -> None:  # noqa: ANN001
            with session_scope() as session:
                fn(session, jobs.list_jobs(session=session, project_id=1, limit=25)[0])

        cases = {
            "(a) REST list": rest,
            "(b) live table": table,
            "(c) last metrics, shipped": lambda: query(
                lambda s, r: summaries.read_last_metrics(session=s, jobs=r)
            ),
            "(d) last metrics, GROUP BY": lambda: query(old_last_metrics),
        }
        times: dict[str, list[float]] = {k: [] for k in cases}
        for _ in range(3):
            for fn in cases.values():
                fn()  # warm caches and plans
        for _ in range(args.runs):
            for label, fn in cases.items():
                t0 = time.perf_counter()
                fn()
                times[label].append(time.perf_counter() - t0)
    finally:
        from services.db import get_engine

        get_engine().dispose()
        drop_database(name)
    points = 25 * 2 * args.steps * len(NAMES)
    print(
        f"{dt.date.today()}, {platform.node()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; 25 jobs, {points} metric points, {args.runs} runs"
    )
    medians = {label: statistics.median(values) for label, values in times.items()}
    for label, median in medians.items():
        print(f"| {label} | {median * 1000:.1f} ms |")
    a, b, c, d = medians.values()
    print(f"(d) / (c) = {d / c:.2f}; (b) / (a) = {b / a:.2f}")


if __name__ == "__main__":
    main()
