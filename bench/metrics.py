"""Benchmark the metrics path: ingest throughput, and emit-to-screen latency over SSE.

1. Ingest: metric batches of 200 points (what a replica's reporter sends) are put on the
   `cohort:metrics` stream, then the scheduler leader's `ingest_once` stores them;
   points stored per second, on PostgreSQL and on SQLite, with every point new.
2. Latency: the api (uvicorn) and the scheduler run as their own processes; a replica's
   `MetricReporter` emits (XADD) 20 points every 100 ms, stamped with the emit time, and
   1 or 100 SSE clients follow the job's stream. Latency = arrival at the client minus the
   emit time (one machine, one clock); p50/p99 over every (point, client).
3. Downsampling: a 1,000,000-point job's chart (`max_points=2000`) from the rollups, from
   the points, and every point read.
4. Wire decode (always run, no database): the ingest's `MetricBatch.decode` and
   `LogBatch.decode` over 1,000 encoded batches of 200 points or lines; per second.

    .venv/bin/python bench/metrics.py --redis redis://127.0.0.1:6379/15

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust) and a Redis it may flush.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import redis
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cli.stack import migrate  # noqa: E402
from tests.conftest import create_database, drop_database  # noqa: E402


def use(database_url: str, redis_url: str, data_dir: str) -> None:
    """Point this process's settings, engine and Redis client at a database."""
    os.environ.update(
        COHORT_DATABASE_URL=database_url, COHORT_REDIS_URL=redis_url, COHORT_DATA_DIR=data_dir
    )
    from services.db import get_engine, get_sessionmaker
    from services.settings import get_settings
    from services.wire.client import get_redis

    for cached in (get_settings, get_engine, get_sessionmaker, get_redis):
        cached.cache_clear()


def make_job(name: str) -> tuple[int, str]:
    """A committed job and a token of its project."""
    from services.auth import tokens
    from services.db import session_scope
    from services.jobs import store as jobs
    from services.jobs.schemas import JobCreate
    from services.settings import get_settings

    token = "bench_" + os.urandom(8).hex()
    with session_scope() as session:
        row = tokens.ensure_token(
            session=session,
            token=token,
            project_name="bench",
            name="bench",
            scopes=["read", "submit", "schedules"],
        )
        job, _ = jobs.create_job(
            session=session,
            project_id=row.project_id,
            job_in=JobCreate(
                name=name, replicas=2, hyperparameters={"epochs": 10_000, "steps_per_epoch": 1000}
            ),
            settings=get_settings(),
        )
        return job.id, token


def drop_pg(name: str) -> None:
    from services.db import get_engine

    get_engine().dispose()
    drop_database(name)


def bench_ingest(
    label: str, client: redis.Redis, batches: int, per_batch: int, rounds: int = 3
) -> float:
    """Points stored per second by the leader's ingest, every point new; the median of
    `rounds` (each a fresh job, the table growing as in a long-lived service)."""
    from services.db import session_scope
    from workers.control.ingest import METRICS, ingest_once

    rates = []
    for r in range(rounds):
        job_id, _ = make_job(f"ingest-{label}-{r}")
        client.delete("cohort:metrics")
        pipe = client.pipeline(transaction=False)
        for b in range(batches):
            replica, first = b % 2, (b // 2) * per_batch // 4
            points = [
                [
                    first + i // 4 + 1,
                    0,
                    ("loss", "accuracy", "step_time", "x")[i % 4],
                    0.5,
                    time.time(),
                ]
                for i in range(per_batch)
            ]
            pipe.xadd(
                "cohort:metrics",
                {
                    "data": json.dumps(
                        {"job_id": job_id, "attempt": 1, "replica": replica, "points": points}
                    )
                },
            )
        pipe.execute()
        total, stored = batches * per_batch, 0
        started = time.perf_counter()
        while stored < total:
            stored += ingest_once(client, METRICS, sessions=session_scope, block_ms=100)
        rates.append(stored / (time.perf_counter() - started))
    rate = statistics.median(rates)
    print(
        f"ingest {label} ({rounds} rounds of {batches * per_batch:,} points): median "
        f"{rate:,.0f} points/s (min {min(rates):,.0f}, max {max(rates):,.0f})"
    )
    return rate


def bench_downsample(label: str, points: int = 1_000_000, runs: int = 5) -> None:
    """A long run's chart, `GET .../metrics?max_points=2000` (the service call behind it),
    on a job of `points` points (2 replicas x 5 metrics): (a) as shipped, from the rollups;
    (b) the same buckets' means from the points themselves (`since_step=0` takes that
    path); (c) reading every point. Interleaved, medians."""
    from services.db import session_scope
    from services.telemetry import downsample, metrics

    job_id, _ = make_job(f"downsample-{label}")
    names, chunk = ("loss", "accuracy", "step_time", "examples_per_sec", "cpu_percent"), 200_000
    for first in range(0, points, chunk):
        rows = [
            {
                "job_id": job_id,
                "attempt": 1,
                "replica": i % 2,
                "step": i // 10 + 1,
                "epoch": i // 10 // 1000,
                "name": names[(i // 2) % 5],
                "value": 1.0 / (i + 1),
                "ts": float(i),
            }
            for i in range(first, min(points, first + chunk))
        ]
        with session_scope() as session:
            metrics.insert_points(session=session, rows=rows)
    if label == "postgresql":
        with session_scope() as session:
            session.execute(sa.text("ANALYZE"))  # as autovacuum would
    ways = {
        "rollups": lambda s: downsample.read_metrics_downsampled(
            session=s, job_id=job_id, max_points=2000
        ),
        "points": lambda s: downsample.read_metrics_downsampled(
            session=s, job_id=job_id, max_points=2000, since_step=0
        ),
        "everything": lambda s: metrics.read_metrics(session=s, job_id=job_id, limit=points),
    }
    times: dict[str, list[float]] = {way: [] for way in ways}
    sizes: dict[str, int] = {}
    for _ in range(runs):
        for way, read in ways.items():
            started = time.perf_counter()
            with session_scope() as session:
                sizes[way] = len(read(session))
            times[way].append(time.perf_counter() - started)
    med = {way: statistics.median(got) * 1000 for way, got in times.items()}
    print(
        f"downsample {label}, {points:,} points in 10 series, max_points=2000 (median of "
        f"{runs}): (a) rollups {sizes['rollups']} points in {med['rollups']:.0f} ms; "
        f"(b) from the points {sizes['points']} in {med['points']:.0f} ms; "
        f"(c) every point {sizes['everything']:,} in {med['everything']:.0f} ms; "
        f"b/a {med['points'] / med['rollups']:.1f}, c/a {med['everything'] / med['rollups']:.0f}"
    )


def skeleton_store(session: Any, rows: list[dict[str, Any]]) -> int:
    """The walking skeleton's store: a multi-row INSERT ... ON CONFLICT ... RETURNING id."""
    from sqlalchemy.dialects import postgresql, sqlite

    from services.models import MetricPoint

    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    statement = (
        insert(MetricPoint)
        .on_conflict_do_nothing(index_elements=["job_id", "attempt", "replica", "step", "name"])
        .returning(MetricPoint.id)
    )
    connection, stored = session.connection(), 0
    for start in range(0, len(rows), 5000):
        stored += len(connection.execute(statement, rows[start : start + 5000]).all())
    return stored


def bench_decode(batches: int = 1000, size: int = 200, rounds: int = 5) -> None:
    """Points and lines the ingest decodes per second (median of `rounds`)."""
    from services.wire.batches import LogBatch, MetricBatch

    metric = [
        MetricBatch(
            7, 1, 0, [(s, s // 100, "loss", 0.5 + s, 1.8e9 + s) for s in range(size)]
        ).encode()
        for _ in range(batches)
    ]
    text = "step 120/500 - loss: 0.4123 - accuracy: 0.8817 - 14ms/step"
    log = [
        LogBatch(7, 1, 0, [(s, 1.8e9 + s, text) for s in range(size)]).encode()
        for _ in range(batches)
    ]
    for label, kind, raws in (("metrics", MetricBatch, metric), ("logs", LogBatch, log)):
        times = []
        for _ in range(rounds):
            started = time.perf_counter()
            for raw in raws:
                kind.decode(raw)
            times.append(time.perf_counter() - started)
        unit = "points" if label == "metrics" else "lines"
        print(
            f"decode {label}: {batches * size / statistics.median(times):,.0f} {unit}/s "
            f"(median of {rounds} x {batches} batches of {size})",
            flush=True,
        )


def bench_store(label: str, rounds: int, points: int) -> tuple[float, float]:
    """Skeleton store vs. this one on the same fresh rows, interleaved; points/s each."""
    from services.db import session_scope
    from services.telemetry import metrics

    job_id, _ = make_job(f"store-{label}")
    rates: dict[str, list[float]] = {"skeleton": [], "now": []}
    for r in range(rounds):
        for way in ("skeleton", "now"):
            # Fresh keys each time by step (the ingest refuses any attempt but the job's).
            first = (2 * r + (way == "now")) * points
            rows = [
                {
                    "job_id": job_id,
                    "attempt": 1,
                    "replica": i % 2,
                    "step": first + i // 8 + 1,
                    "epoch": 0,
                    "name": f"m{(i // 2) % 4}",
                    "value": 0.5,
                    "ts": 1.0,
                }
                for i in range(points)
            ]
            started = time.perf_counter()
            with session_scope() as session:
                if way == "skeleton":
                    stored = skeleton_store(session, rows)
                else:
                    stored = len(metrics.insert_points(session=session, rows=rows))
            assert stored == points
            rates[way].append(points / (time.perf_counter() - started))
    old, new = statistics.median(rates["skeleton"]), statistics.median(rates["now"])
    print(
        f"store {label} (median of {rounds}, {points} points each): skeleton "
        f"{old:,.0f}/s, now {new:,.0f}/s, ratio {new / old:.2f}"
    )
    return old, new


async def _client(
    http: httpx.AsyncClient,
    url: str,
    headers: dict[str, str],
    latencies: list[float],
    ready: asyncio.Event,
    counter: list[int],
    stop: asyncio.Event,
) -> None:
    async with http.stream("GET", url, headers=headers, params={"kinds": "metric"}) as response:
        counter[0] += 1
        if counter[0] == counter[1]:
            ready.set()
        # Arrival is stamped per network chunk and only the `data:` lines are decoded:
        # with 100 clients in one Python process, a full parser would measure itself.
        buffer = b""
        async for chunk in response.aiter_bytes():
            now = time.time()
            buffer += chunk
            *events, buffer = buffer.split(b"\n\n")
            for event in events:
                if event.startswith(b"event: metric\n"):
                    data = event[event.index(b"data: ") + 6 : event.index(b"\nid: ")]
                    latencies.append(now - json.loads(data)["ts"])
            if stop.is_set():
                return


def _emit(redis_url: str, job_id: int, seconds: float, rate: int) -> int:
    from workers.node.report_shipper import MetricReporter

    reporter = MetricReporter.from_url(redis_url, job_id=job_id, attempt=1, replica=0)
    step, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        for _ in range(max(1, rate // 20)):  # 10 emits a second of 2 points per step
            step += 1
            ts = time.time()
            reporter.add(step, 0, "loss", 0.5, ts)
            reporter.add(step, 0, "accuracy", 0.9, ts)
        reporter.flush()  # the emit: one XADD, as the callback's flush does
        time.sleep(0.1)
    reporter.close()
    return step * 2


async def bench_latency(base: str, redis_url: str, clients: int, seconds: float, rate: int) -> dict:
    job_id, token = make_job(f"latency-{clients}")
    url, headers = f"{base}/api/v1/jobs/{job_id}/stream", {"Authorization": f"Bearer {token}"}
    latencies: list[float] = []
    ready, stop, counter = asyncio.Event(), asyncio.Event(), [0, clients]
    # One httpx client (its own connection per stream): creating 100 clients would
    # measure 100 TLS-context set-ups, not the server.
    http = httpx.AsyncClient(
        timeout=httpx.Timeout(10, read=60), limits=httpx.Limits(max_connections=clients + 10)
    )
    tasks = [
        asyncio.create_task(_client(http, url, headers, latencies, ready, counter, stop))
        for _ in range(clients)
    ]
    connecting = time.perf_counter()
    await asyncio.wait_for(ready.wait(), 300)
    print(f"{clients} client(s) connected in {time.perf_counter() - connecting:.1f}s")
    await asyncio.sleep(1.0)  # every client is past its (empty) history
    emitted = await asyncio.to_thread(_emit, redis_url, job_id, seconds, rate)
    deadline = time.monotonic() + 10
    while len(latencies) < emitted * clients and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    stop.set()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await http.aclose()
    ms = sorted(x * 1000 for x in latencies)
    result = {
        "clients": clients,
        "rate": rate,
        "points": emitted,
        "received": len(ms),
        "p50_ms": statistics.median(ms),
        "p99_ms": ms[int(len(ms) * 0.99) - 1],
    }
    print(f"latency, {clients} client(s): {result}")
    return result


def start(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "cli", *args],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/15")
    parser.add_argument("--batches", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=100, help="points emitted per second")
    parser.add_argument("--skip-ingest", action="store_true")
    args = parser.parse_args()
    client = redis.Redis.from_url(args.redis, decode_responses=True)
    client.flushdb()
    machine = platform.processor() or platform.machine()
    print(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {machine}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}"
    )
    bench_decode()
    name = f"cohort_bench_{os.getpid()}"
    with tempfile.TemporaryDirectory() as tmp:
        sqlite_url = f"sqlite:///{tmp}/bench.db"
        migrate(sqlite_url)
        use(sqlite_url, args.redis, tmp)
        if not args.skip_ingest:
            bench_store("sqlite", 3, 50_000)
            bench_ingest("sqlite", client, args.batches, 200)
            bench_downsample("sqlite", runs=3)
        pg_url = create_database(name)  # fresh and migrated, as the tests'
        use(pg_url, args.redis, tmp)
        try:
            if not args.skip_ingest:
                bench_store("postgresql", 3, 50_000)
                bench_ingest("postgresql", client, args.batches, 200)
                bench_downsample("postgresql", runs=3)
            port = 18000 + os.getpid() % 1000
            env = {
                **os.environ,
                "COHORT_API_PORT": str(port),
                "COHORT_NODE_ID": "bench",
                # The scheduler signs what it sends agents; none runs here.
                "COHORT_SIGNING_KEY": os.environ.get("COHORT_SIGNING_KEY") or "b" * 64,
            }
            procs = [start(["api"], env), start(["scheduler"], env)]
            try:
                from cohort.client import Client

                Client(f"http://127.0.0.1:{port}").wait_ready(60)
                for clients in (1, 100):
                    asyncio.run(
                        bench_latency(
                            f"http://127.0.0.1:{port}", args.redis, clients, args.seconds, args.rate
                        )
                    )
            finally:
                for proc in procs:
                    proc.terminate()
                    proc.wait(10)
        finally:
            drop_pg(name)


if __name__ == "__main__":
    main()
