"""The job page's chart request at 1,000,000 points, over HTTP.

What the job page (api/static/job.js, `loadHistory`) asks when it opens:
`GET /api/v1/jobs/{id}/metrics?name=loss&name=accuracy&name=examples_per_sec&name=epoch_loss
&name=epoch_accuracy&max_points=5000`, sent here to a real `cohort api` (uvicorn) on
PostgreSQL, one request after another on a keep-alive connection, as a browser would.

The job: 2 replicas x STEPS steps of five per-step metrics (loss, accuracy,
examples_per_sec, learning_rate, step_time: the first three are drawn) plus epoch_loss and
epoch_accuracy once every 1,000 steps, stored by the ingest's own store
(`services.telemetry.metrics.insert_points`, which keeps the rollups), then ANALYZEd as
autovacuum would. Interleaved, so that every figure sees the same machine:

  (a) the request at 1M points;
  (b) the same request for a job of 10,000 points (what the page costs when the history is
      small: the floor of auth, routing, the series' queries and the JSON);
  (c) the service call behind (a) in-process (`downsample.read_metrics_downsampled` in a
      session): the SQL and its rows, no HTTP, no response model;
  (d) `GET /api/v1/jobs/{id}` of the same job (the page's other request: an HTTP floor).

    .venv/bin/python bench/job_page.py [--steps 100000] [--runs 30] [--quick]

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust) and a Redis (the api's).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import processes  # noqa: E402
from tests.conftest import create_database, drop_database  # noqa: E402

TOKEN = "bench-job-page-0123456789abcdef0123"
PAGE_NAMES = ("loss", "accuracy", "examples_per_sec", "epoch_loss", "epoch_accuracy")
STEP_NAMES = ("loss", "accuracy", "examples_per_sec", "learning_rate", "step_time")
EPOCH_STEPS = 1000
CHUNK = 100_000


def page_query() -> str:
    """The query string job.js sends: its five names, then max_points."""
    return "&".join(f"name={n}" for n in PAGE_NAMES) + "&max_points=5000"


def fill(job_id: int, steps: int) -> int:
    """Store the job's points through the ingest's store; returns how many."""
    from services.db import session_scope
    from services.telemetry import metrics

    def rows():  # type: ignore[no-untyped-def]
        for step in range(1, steps + 1):
            epoch = (step - 1) // EPOCH_STEPS
            for replica in (0, 1):
                ts = 1.8e9 + step * 0.05
                for k, name in enumerate(STEP_NAMES):
                    yield {
                        "job_id": job_id,
                        "attempt": 1,
                        "replica": replica,
                        "step": step,
                        "epoch": epoch,
                        "name": name,
                        "value": 1.0 / step + k,
                        "ts": ts,
                    }
                if step % EPOCH_STEPS == 0:
                    for name in ("epoch_loss", "epoch_accuracy"):
                        yield {
                            "job_id": job_id,
                            "attempt": 1,
                            "replica": replica,
                            "step": step,
                            "epoch": epoch,
                            "name": name,
                            "value": 1.0 / step,
                            "ts": ts,
                        }

    stored, chunk = 0, []
    for row in rows():
        chunk.append(row)
        if len(chunk) == CHUNK:
            with session_scope() as session:
                stored += len(metrics.insert_points(session=session, rows=chunk))
            chunk = []
    if chunk:
        with session_scope() as session:
            stored += len(metrics.insert_points(session=session, rows=chunk))
    return stored


def start_api(db_url: str, data: Path) -> tuple[subprocess.Popen[bytes], str]:
    return processes.start_api(
        {**os.environ, "COHORT_DATABASE_URL": db_url, "COHORT_DATA_DIR": str(data)}
    )


def summary(ms: list[float]) -> str:
    ordered = sorted(ms)
    p99 = ordered[min(len(ordered) - 1, int(round(0.99 * len(ordered))) - 1)]
    return f"{statistics.median(ms):.1f} ms (p99 {p99:.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--redis", default=os.environ.get("COHORT_REDIS_URL", "redis://127.0.0.1:6379/13")
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=100_000,
        help="steps of the big job (x 2 replicas x 5 names, + epochs)",
    )
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="10 runs")
    args = parser.parse_args()
    if args.quick:
        args.runs = 10

    name = f"telemetry_job_page_{os.getpid()}"
    db_url = create_database(name)
    os.environ.update(COHORT_DATABASE_URL=db_url, COHORT_REDIS_URL=args.redis)
    from services.auth import tokens
    from services.db import get_engine, session_scope
    from services.telemetry import downsample
    from tests.factories import create_job

    data = Path(f"/tmp/{name}")
    data.mkdir(exist_ok=True)
    process = None
    try:
        with session_scope() as session:
            row = tokens.ensure_token(session=session, token=TOKEN, scopes=["read"])
            big = create_job(session, row.project_id, name="big", replicas=2).id
            small = create_job(session, row.project_id, name="small", replicas=2).id
        started = time.perf_counter()
        points = fill(big, args.steps)
        fill_s = time.perf_counter() - started
        small_points = fill(small, 1000)
        with get_engine().connect() as connection:
            connection.execute(sa.text("COMMIT"))
            connection.execute(sa.text("ANALYZE metric_points"))
            connection.execute(sa.text("ANALYZE metric_rollups"))
        print(
            f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; "
            f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}; "
            f"big job {points:,} points (stored in {fill_s:.0f} s), small job "
            f"{small_points:,}",
            flush=True,
        )

        process, url = start_api(db_url, data)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        query = page_query()
        names = list(PAGE_NAMES)

        def service_call() -> int:
            with session_scope() as session:
                return len(
                    downsample.read_metrics_downsampled(
                        session=session, job_id=big, max_points=5000, names=names
                    )
                )

        times: dict[str, list[float]] = {k: [] for k in ("big", "small", "sql", "job")}
        sizes: dict[str, int] = {}
        with httpx.Client(base_url=url, headers=headers, timeout=60) as http:
            for warm in range(2):  # first requests: connections, caches
                http.get(f"/api/v1/jobs/{big}/metrics?{query}").raise_for_status()
                http.get(f"/api/v1/jobs/{small}/metrics?{query}").raise_for_status()
                service_call()
                del warm
            for _ in range(args.runs):
                for way in times:
                    begun = time.perf_counter()
                    if way == "sql":
                        sizes[way] = service_call()
                    else:
                        path = (
                            f"/api/v1/jobs/{big}"
                            if way == "job"
                            else f"/api/v1/jobs/{big if way == 'big' else small}/metrics?{query}"
                        )
                        response = http.get(path)
                        response.raise_for_status()
                        if way != "job":
                            sizes[way] = len(response.json()["items"])
                            sizes[f"{way}_bytes"] = len(response.content)
                    times[way].append((time.perf_counter() - begun) * 1000)
        print(f"max_points=5000 with the page's five names, median of {args.runs}, interleaved:")
        print("| request | points returned | median (p99) |")
        print("|---|---|---|")
        print(
            f"| (a) HTTP, {points:,}-point job | {sizes['big']:,} "
            f"({sizes['big_bytes'] / 1e3:.0f} kB) | {summary(times['big'])} |"
        )
        print(
            f"| (b) HTTP, {small_points:,}-point job | {sizes['small']:,} "
            f"({sizes['small_bytes'] / 1e3:.0f} kB) | {summary(times['small'])} |"
        )
        print(
            f"| (c) the service call of (a), in-process | {sizes['sql']:,} | "
            f"{summary(times['sql'])} |"
        )
        print(f"| (d) GET /jobs/{{id}} | | {summary(times['job'])} |")
        big_ms, small_ms, sql_ms = (statistics.median(times[k]) for k in ("big", "small", "sql"))
        print(
            f"a/b {big_ms / small_ms:.2f}; "
            f"a - c (HTTP, validation, JSON of the answer) {big_ms - sql_ms:.1f} ms"
        )
    finally:
        processes.stop(process)
        get_engine().dispose()
        drop_database(name)
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
