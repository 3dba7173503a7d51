"""Benchmark the MLflow export (services/tracking/): what it costs the control plane.

Each round makes a job of a tracked project, has the leader's ingest store its points
(2 replicas × 2 series, as replicas report them: batches of 200 through the metrics
stream), ends the job, then runs the exporter's rounds until the run has ended on a real
`mlflow server` (SQLite backend, tests/mlflowserver.py). Side by side in every round:

* the ingest's CPU time for those points and the exporter's (the calling thread's CPU
  time: the control plane's share; the MLflow server is another process, measured apart);
* the export's wall time: points per second into MLflow, the server's answers included.

Reported: medians over the rounds of points/s exported, the exporter's CPU per 10k points,
the ingest's, their per-round ratio (export / ingest), and the server's CPU per 10k points.

    .venv/bin/python bench/mlflow_export.py --redis redis://127.0.0.1:6379/15 --points 40000

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust) and a Redis it may flush.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.metrics import use  # noqa: E402
from tests.conftest import create_database, drop_database  # noqa: E402
from tests.e2e.conftest import free_port  # noqa: E402
from tests.mlflowserver import MlflowServer  # noqa: E402


def cpu_of(process: psutil.Process) -> float:
    """CPU seconds of a process and its children (the server's workers)."""
    total = sum(process.cpu_times()[:2])
    for child in process.children(recursive=True):
        total += sum(child.cpu_times()[:2])
    return total


def one_round(server: MlflowServer, points: int) -> dict[str, float]:
    from services.db import session_scope
    from services.jobs.transitions import transition_job
    from services.models import MlflowRun
    from services.settings import get_settings
    from services.statuses import JobStatus
    from services.tracking import targets
    from services.tracking.exporter import Exporter
    from services.tracking.schemas import TrackingUpdate
    from services.wire.client import get_redis
    from services.wire.keys import METRICS_STREAM
    from tests.factories import create_job, create_token
    from workers.control.ingest import METRICS, ingest_once

    bus = get_redis()
    name = f"bench-{uuid.uuid4().hex[:8]}"
    with session_scope() as session:
        _, token = create_token(session, name)
        targets.set_tracking(
            session=session,
            project_name=name,
            tracking_in=TrackingUpdate(tracking_uri=server.uri),
            settings=get_settings(),
        )
    exporter = Exporter(get_settings(), bus)
    exporter.run_round()  # the project's start
    with session_scope() as session:
        job = create_job(session, token.project_id, name="bench", replicas=2)
    for status in (JobStatus.SCHEDULED, JobStatus.RUNNING):
        with session_scope() as session:
            transition_job(session=session, job_id=job.id, target=status)
    steps = points // 4
    for replica in (0, 1):
        for first in range(1, steps + 1, 100):  # 100 steps × 2 series: 200 points a batch
            batch = [
                [step, 0, series, 1.0 / step + replica, 1.7e9 + step]
                for step in range(first, min(first + 100, steps + 1))
                for series in ("loss", "accuracy")
            ]
            data = {"job_id": job.id, "attempt": 1, "replica": replica, "points": batch}
            bus.xadd(METRICS_STREAM, {"data": json.dumps(data)})
    cpu = time.thread_time()
    stored = 0
    while stored < steps * 4:
        stored += ingest_once(bus, METRICS, sessions=session_scope, block_ms=100)
    ingest_cpu = time.thread_time() - cpu
    with session_scope() as session:
        transition_job(session=session, job_id=job.id, target=JobStatus.SUCCEEDED)

    server_process = psutil.Process(server.process.pid)  # type: ignore[union-attr]
    server_cpu = cpu_of(server_process)
    wall, cpu = time.perf_counter(), time.thread_time()
    exported = 0
    while True:
        exported += exporter.run_round().points
        with session_scope() as session:
            if session.get_one(MlflowRun, job.id).ended_at is not None:
                break
    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    assert exported == stored, (exported, stored)
    per_10k = 10_000 / stored
    return {
        "points": stored,
        "points_per_s": stored / wall,
        "export_cpu_ms_10k": cpu * per_10k * 1000,
        "ingest_cpu_ms_10k": ingest_cpu * per_10k * 1000,
        "ratio": cpu / ingest_cpu,
        "server_cpu_ms_10k": (cpu_of(server_process) - server_cpu) * per_10k * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis", required=True, help="a Redis URL this may flush")
    parser.add_argument("--points", type=int, default=40_000, help="points a round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    database = f"cohort_bench_mlflow_{os.getpid()}"
    url = create_database(database)
    with tempfile.TemporaryDirectory(prefix="mlflow-bench-") as tmp:
        use(url, args.redis, str(Path(tmp) / "data"))
        from services.wire.client import get_redis

        get_redis().flushdb()
        server = MlflowServer(Path(tmp) / "mlflow", free_port())
        server.start()
        try:
            rows = [one_round(server, args.points) for _ in range(args.rounds)]
        finally:
            server.stop()
            drop_database(database)
    load = os.getloadavg()[0]
    print(f"{args.rounds} rounds of {rows[0]['points']:.0f} points, load {load:.1f}")
    print(
        f"{'round':>5} {'points/s':>10} {'export CPU ms/10k':>18} {'ingest CPU ms/10k':>18} "
        f"{'ratio':>6} {'server CPU ms/10k':>18}"
    )
    for i, row in enumerate(rows, 1):
        print(
            f"{i:>5} {row['points_per_s']:>10,.0f} {row['export_cpu_ms_10k']:>18.1f} "
            f"{row['ingest_cpu_ms_10k']:>18.1f} {row['ratio']:>6.2f} "
            f"{row['server_cpu_ms_10k']:>18.1f}"
        )
    median = {key: statistics.median(row[key] for row in rows) for key in rows[0]}
    print(
        f"  med {median['points_per_s']:>10,.0f} {median['export_cpu_ms_10k']:>18.1f} "
        f"{median['ingest_cpu_ms_10k']:>18.1f} {median['ratio']:>6.2f} "
        f"{median['server_cpu_ms_10k']:>18.1f}"
    )


if __name__ == "__main__":
    main()
