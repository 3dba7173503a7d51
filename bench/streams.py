"""The api with many open live streams: `/healthz` latency, the api's memory, and its
Redis connections.

A real `cohort api` (uvicorn) on PostgreSQL and Redis. One token opens STREAMS SSE streams
(`GET /api/v1/jobs/{id}/stream`, all kinds) spread over JOBS jobs, the cap raised for
it (COHORT_MAX_STREAMS_PER_TOKEN); while they are open a feeder stores a metric batch
every 0.1 s (the ingest, as the scheduler runs it) so the streams carry live events, and
`/healthz` is timed, one request after another, for DURATION seconds. Reported: `/healthz`
p50/p99 with no stream and with all of them open, the api's RSS, and the api's
Redis connections before and with the streams (`CLIENT LIST` would show the same).

`--tree DIR` runs the api of another checkout (e.g. the commit before the shared feed
reader, where each stream held its own Redis connection). `--against DIR` runs both,
a fresh database and api per side and round, the order swapped every round, and reports
the per-round ratios (tree / against) of `/healthz` p50, p99 and the api's CPU with the
streams open, and their medians.

    .venv/bin/python bench/streams.py --redis redis://127.0.0.1:6379/14 [--streams 1000]
        [--jobs 50] [--duration 20] [--idle-duration S] [--tree /tmp/cohort-old]
        [--against /tmp/before [--rounds 3]]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import processes  # noqa: E402
from tests.conftest import create_database, drop_database  # noqa: E402

TOKEN = "bench-streams-token-0123456789abcdef"


def make_jobs(url: str, count: int) -> list[int]:
    os.environ["COHORT_DATABASE_URL"] = url
    from services.auth import tokens
    from services.db import session_scope
    from tests.factories import create_job

    with session_scope() as session:
        row = tokens.ensure_token(session=session, token=TOKEN, scopes=["read"])
        return [
            create_job(session, row.project_id, name=f"s{i}", replicas=1).id for i in range(count)
        ]


def start_api(
    tree: Path, db_url: str, redis_url: str, data: Path, streams: int
) -> tuple[subprocess.Popen[bytes], str]:
    return processes.start_api(
        {
            **os.environ,
            "COHORT_DATABASE_URL": db_url,
            "COHORT_REDIS_URL": redis_url,
            "COHORT_BOOTSTRAP_TOKEN": TOKEN,
            "COHORT_DATA_DIR": str(data),
            "COHORT_MAX_STREAMS_PER_TOKEN": str(streams + 10),
        },
        cwd=tree,
    )


def time_healthz(url: str, duration: float) -> list[float]:
    """Milliseconds per `/healthz`, one after another on one keep-alive connection."""
    times: list[float] = []
    with httpx.Client(base_url=url, timeout=30) as client:
        end = time.monotonic() + duration
        while time.monotonic() < end:
            start = time.perf_counter()
            assert client.get("/healthz").status_code == 200
            times.append((time.perf_counter() - start) * 1000)
            time.sleep(0.01)
    return times


def summary(times: list[float]) -> str:
    cuts = statistics.quantiles(times, n=100)
    return (
        f"p50 {cuts[49]:.1f} ms, p99 {cuts[98]:.1f} ms, max {max(times):.1f} ms "
        f"({len(times)} requests)"
    )


class Streams:
    """STREAMS raw SSE clients in a thread of their own (asyncio): they read and count
    bytes, as a browser would, and hold their connections until stopped."""

    def __init__(self, url: str, job_ids: list[int], count: int) -> None:
        self.host, self.port = url.removeprefix("http://").split(":")
        self.paths = [f"/api/v1/jobs/{job_ids[i % len(job_ids)]}/stream" for i in range(count)]
        self.opened = 0
        self.refused = 0
        self.received = 0
        self.loop = asyncio.new_event_loop()
        self.stop = asyncio.Event()
        self.thread = threading.Thread(
            target=self.loop.run_until_complete, args=(self._run(),), daemon=True
        )

    async def _one(self, path: str) -> None:
        reader, writer, status = await processes.open_sse(self.host, int(self.port), path, TOKEN)
        if b" 200 " not in status:
            self.refused += 1
            writer.close()
            return
        self.opened += 1
        while not self.stop.is_set():
            chunk = await reader.read(65536)
            if not chunk:
                break
            self.received += len(chunk)
        writer.close()

    async def _run(self) -> None:
        tasks = []
        for path in self.paths:  # a few at a time, as clients arrive
            tasks.append(asyncio.create_task(self._one(path)))
            await asyncio.sleep(0.002)
        await self.stop.wait()
        for task in tasks:  # each waits for its next bytes: up to a keep-alive away
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self.thread.join(15)


def feed(redis_url: str, job_ids: list[int], stop: threading.Event) -> None:
    """A metric batch every 0.1 s for the jobs in turn, stored by the real ingest."""
    from services.db import session_scope
    from workers.control.ingest import METRICS, ingest_once

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    step = 0
    while not stop.is_set():
        step += 1
        job_id = job_ids[step % len(job_ids)]
        points = [[step, 0, name, 0.5, time.time()] for name in ("loss", "accuracy")]
        client.xadd(
            "cohort:metrics",
            {"data": json.dumps({"job_id": job_id, "attempt": 1, "replica": 0, "points": points})},
        )
        ingest_once(client, METRICS, sessions=session_scope, block_ms=50)
        time.sleep(0.1)


def redis_clients(api: psutil.Process, redis_port: int) -> int:
    """The api's open connections to Redis."""
    return sum(
        1
        for c in api.net_connections(kind="tcp")
        if c.raddr and c.raddr.port == redis_port and c.status == "ESTABLISHED"
    )


def measure(args: argparse.Namespace, tree: Path) -> dict[str, float]:
    """One side once: a fresh database and api of `tree`, `/healthz` timed without and
    with the streams; prints its figures and returns them."""
    bus = redis.Redis.from_url(args.redis, decode_responses=True)
    bus.flushdb()
    port = int(bus.connection_pool.connection_kwargs.get("port", 6379))
    name = f"cohort_bench_streams_{os.getpid()}"
    db_url = create_database(name)
    data = Path(f"/tmp/{name}")
    process = None
    try:
        job_ids = make_jobs(db_url, args.jobs)
        process, url = start_api(tree, db_url, args.redis, data, args.streams)
        api = psutil.Process(process.pid)
        time_healthz(url, 2)  # warm up
        idle = time_healthz(url, args.idle_duration)
        rss_idle, clients_idle = api.memory_info().rss, redis_clients(api, port)
        streams = Streams(url, job_ids, args.streams)
        streams.start()
        deadline = time.monotonic() + 120
        while streams.opened + streams.refused < args.streams:
            assert time.monotonic() < deadline, f"only {streams.opened} streams opened"
            time.sleep(0.5)
        stop = threading.Event()
        feeder = threading.Thread(target=feed, args=(args.redis, job_ids, stop), daemon=True)
        feeder.start()
        time.sleep(3)  # past every stream's history, into the live feed
        cpu_before, wall_before = sum(api.cpu_times()[:2]), time.monotonic()
        busy = time_healthz(url, args.duration)
        cpu_busy = (sum(api.cpu_times()[:2]) - cpu_before) / (time.monotonic() - wall_before)
        rss_busy, clients_busy = api.memory_info().rss, redis_clients(api, port)
        stop.set()
        feeder.join(5)
        streams.close()
    finally:
        processes.stop(process)
        drop_database(name)
    print(
        f"date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; machine: "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}; tree: {tree}"
    )
    print(
        f"streams: {streams.opened} open ({streams.refused} refused) over "
        f"{args.jobs} jobs; {streams.received / 1e6:.1f} MB received by them"
    )
    print(f"/healthz, no stream:      {summary(idle)}")
    print(f"/healthz, streams open:   {summary(busy)}")
    print(
        f"api RSS: {rss_idle / 2**20:.0f} MiB idle, {rss_busy / 2**20:.0f} MiB "
        f"with the streams; api CPU with the streams: {cpu_busy:.0%} of a core; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print(f"the api's Redis connections: {clients_idle} idle, {clients_busy} with the streams")
    cuts = statistics.quantiles(busy, n=100)
    return {"p50": cuts[49], "p99": cuts[98], "cpu": cpu_busy, "mb": streams.received / 1e6}


def compare(args: argparse.Namespace) -> None:
    """`--tree` and `--against` side by side, the order swapped every round; per figure
    the per-round ratios (this / against) and their median (never a ratio of medians)."""
    sides = {"this": args.tree, "against": args.against}
    runs: dict[str, list[dict[str, float]]] = {"this": [], "against": []}
    for round_ in range(1, args.rounds + 1):
        order = list(sides) if round_ % 2 else list(sides)[::-1]
        for side in order:
            print(f"--- round {round_}, {side} (load average {os.getloadavg()[0]:.1f})")
            runs[side].append(measure(args, sides[side]))
    print(f"\nthis: {args.tree}; against: {args.against}; {args.rounds} interleaved rounds")
    print("| figure (streams open) | this | against | this / against per round | median |")
    print("|---|---|---|---|---|")
    for key in ("p50", "p99", "cpu"):
        this = [r[key] for r in runs["this"]]
        other = [r[key] for r in runs["against"]]
        ratios = [a / b for a, b in zip(this, other, strict=True)]
        print(
            f"| {key} | {', '.join(f'{v:.2f}' for v in this)} | "
            f"{', '.join(f'{v:.2f}' for v in other)} | "
            f"{', '.join(f'{r:.2f}' for r in ratios)} | {statistics.median(ratios):.2f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/14")
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--idle-duration", type=float, help="default: --duration")
    parser.add_argument("--tree", type=Path, default=ROOT)
    parser.add_argument("--against", type=Path, help="another checkout, side by side")
    parser.add_argument("--rounds", type=int, default=3, help="with --against")
    args = parser.parse_args()
    if args.idle_duration is None:
        args.idle_duration = args.duration
    os.environ["COHORT_REDIS_URL"] = args.redis
    if args.against is None:
        measure(args, args.tree)
    else:
        compare(args)


if __name__ == "__main__":
    main()
