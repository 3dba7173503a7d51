"""Steady telemetry load: N jobs x 2 replicas reporting at once, through the real ingest on
PostgreSQL, measuring stored points/s and emit -> SSE latency at the same time.

Real parts: a `cohort api` (uvicorn) and a `cohort scheduler` (whose leader runs the metrics
and logs ingest threads, as in a stack) on a fresh PostgreSQL database and a Redis it may
flush. An emitter process plays the agents: for each of the 2N replicas an agent's
`MetricReporter` (workers/node/report_shipper.py: one `MetricBatch` XADD per flush on
`cohort:metrics`, with its Redis-restart check) is fed STEPS steps a second of NAMES metric
names and flushed every 0.25 s, the replicas' flushes spread over the 0.25 s as
unsynchronised replicas' are. Every point's `value` is the time of the flush that sends it
(its emit); its `ts` when its step "ended". CLIENTS SSE clients (`GET /jobs/{id}/stream`,
all kinds, as the job page opens it) are spread over the N jobs, client i following job
i mod N, in one asyncio process; latency = arrival at the client - emit (one clock).

Per N, after a warm-up, over the same window of SECONDS: points stored per second read
from PostgreSQL (rows with ids above the newest at the window's start), points emitted per
second, what the ingest left unread at the window's end, p50/p99 emit -> SSE over every
(point emitted in the window, client), and the CPU of the api and the scheduler.
Each N uses its own fresh jobs.

    .venv/bin/python bench/telemetry_load.py --redis redis://127.0.0.1:6379/13 [--quick]
        [--jobs 10,50,200] [--clients 100] [--steps 25] [--names 5] [--seconds 20]
        [--tree DIR]   # the api and scheduler of another checkout, e.g. the commit before

Needs PostgreSQL on 127.0.0.1:5432 (user postgres, trust).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import gc
import heapq
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import redis
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import processes  # noqa: E402

TOKEN = "bench-telemetry-load-0123456789abcdef"
FLUSH = 0.25  # seconds between a replica's flushes, as the runner's and the agent's
NAMES = (
    "loss",
    "accuracy",
    "examples_per_sec",
    "learning_rate",
    "step_time",
    "grad_norm",
    "val_loss",
    "val_accuracy",
)


# -- the emitter (its own process: the agents) ---------------------------------------------
def emit(redis_url: str, job_ids: list[int], steps: float, names: int, seconds: float) -> None:
    """Play 2 replicas of each job for `seconds`; print one JSON line a second,
    {"t": unix time, "points": emitted so far}, then {"done": ...}."""
    from workers.node.report_shipper import MetricReporter

    chosen = NAMES[:names]
    replicas = [(job, index) for job in job_ids for index in (0, 1)]
    reporters = [
        MetricReporter.from_url(
            redis_url, job_id=job, attempt=1, replica=index, flush_interval=3600, flush_points=10**9
        )
        for job, index in replicas
    ]
    # No cycle collection from here on. This one process plays every replica's agent, and
    # each reporter keeps its last 30 s of points for a replay after a wipe of Redis
    # (workers/node/replay.py): 420 replicas' worth is some 50 times a real agent's heap,
    # and its full collections (150-330 ms, growing over the window) came between a flush's
    # emit stamp and its XADD, for every replica at once: the emit -> SSE tail measured
    # them, where a real cluster's agents each collect their own small heap.
    gc.freeze()
    gc.disable()
    # Set up (on a loaded machine, imports take seconds): the clock starts now.
    print(json.dumps({"t": time.time(), "points": 0, "ready": True}), flush=True)
    start = time.monotonic() + 0.1
    # Each replica's own phase in the flush period, as unsynchronised replicas have.
    due = [(start + FLUSH * i / len(replicas), i) for i in range(len(replicas))]
    heapq.heapify(due)
    done_steps = [0] * len(replicas)
    emitted, next_report, end = 0, start, start + seconds
    while due:
        at, i = heapq.heappop(due)
        if at >= end:
            continue
        pause = at - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        now = time.time()
        # The steps that ended since this replica's last flush (a steady step rate).
        upto = int((time.monotonic() - start) * steps)
        reporter, first = reporters[i], done_steps[i]
        for step in range(first + 1, upto + 1):
            ts = now - (upto - step) / steps
            for name in chosen:
                reporter.add(step, step // 1000, name, now, ts)
        done_steps[i] = max(first, upto)
        emitted += (upto - first) * len(chosen) if upto > first else 0
        reporter.flush()  # the emit: one XADD, as the agent's shipper does
        heapq.heappush(due, (at + FLUSH, i))
        if time.monotonic() >= next_report:
            print(json.dumps({"t": time.time(), "points": emitted}), flush=True)
            next_report += 1.0
    print(json.dumps({"t": time.time(), "points": emitted, "done": True}), flush=True)
    for reporter in reporters:
        reporter.close()


# -- the SSE clients -----------------------------------------------------------------------
_VALUE = re.compile(rb'"value":([-+0-9.eE]+)')


@dataclass
class Clients:
    """`count` raw SSE clients in this process's event loop: each records (emit, arrival)
    of every metric event (arrival stamped per network read; the emit is the value)."""

    host: str
    port: int
    paths: list[str]
    opened: int = 0
    samples: list[tuple[float, float]] = field(default_factory=list)
    bytes: int = 0
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def one(self, path: str) -> None:
        reader, writer, status = await processes.open_sse(self.host, self.port, path, TOKEN)
        if b" 200 " not in status:
            raise RuntimeError(f"{path}: {status!r}")
        self.opened += 1
        samples, tail = self.samples, b""
        while not self.stop.is_set():
            chunk = await reader.read(1 << 16)
            if not chunk:
                break
            now = time.time()
            self.bytes += len(chunk)
            # A value split across two reads is found whole in the next one.
            data = tail + chunk
            cut = data.rfind(b"\n")
            data, tail = data[: cut + 1], data[cut + 1 :]
            samples.extend((float(v), now) for v in _VALUE.findall(data))
        writer.close()


async def follow_feed(
    redis_url: str, job_id: int, samples: list[tuple[float, float]], stop: asyncio.Event
) -> None:
    """(emit, arrival) of every point of one job's live feed (`cohort:live:<job>`, what
    the ingest publishes after its commit): the ingest's share of the latency."""
    import orjson
    import redis.asyncio as aredis

    client = aredis.Redis.from_url(redis_url)
    position = "$"
    try:
        while not stop.is_set():
            reply = await client.xread({f"cohort:live:{job_id}": position}, block=200)
            now = time.time()
            for _key, entries in reply or []:
                for entry_id, fields in entries:
                    position = entry_id
                    samples.extend((row[6], now) for row in orjson.loads(fields[b"rows"]))
    finally:
        await client.aclose()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q * len(ordered))) - 1))]


# -- the stack -------------------------------------------------------------------------------
def start_service(
    tree: Path, args: list[str], env: dict[str, str], log: Path, profile: Path | None = None
) -> subprocess.Popen[bytes]:
    # cProfile writes its stats when the service exits.
    python = (
        None
        if profile is None
        else [sys.executable, "-m", "cProfile", "-o", str(profile / f"{args[0]}.prof")]
    )
    return processes.start_cli(args, env, cwd=tree, log=log, python=python)


def make_jobs(count: int) -> list[int]:
    from services.auth import tokens
    from services.db import session_scope
    from tests.factories import create_job

    with session_scope() as session:
        row = tokens.ensure_token(session=session, token=TOKEN, scopes=["read"])
        return [
            create_job(session, row.project_id, name=f"load-{i}", replicas=2).id
            for i in range(count)
        ]


def newest_id(engine: sa.Engine) -> int:
    with engine.connect() as connection:
        return int(
            connection.execute(
                sa.text("SELECT coalesce(max(id), 0) FROM metric_points")
            ).scalar_one()
        )


def stored_after(engine: sa.Engine, first: int) -> int:
    with engine.connect() as connection:
        return int(
            connection.execute(
                sa.text("SELECT count(*) FROM metric_points WHERE id > :a"), {"a": first}
            ).scalar_one()
        )


def unread(bus: redis.Redis) -> int:
    """Entries of cohort:metrics the ingest has not yet stored (not read, or read and not
    acknowledged)."""
    try:
        groups = bus.xinfo_groups("cohort:metrics")
    except redis.ResponseError:
        return 0
    return sum(int(g.get("lag") or 0) + int(g.get("pending") or 0) for g in groups)


def cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system


@dataclass
class Round:
    jobs: int
    offered: float  # points/s emitted in the window
    stored: float  # points/s stored in the window
    backlog: int  # stream entries unread at the window's end
    lags: list[int]  # stream entries unread, once a second through the window
    p50: float
    p99: float
    feed_p50: float  # emit -> the live feed (the ingest's share), one job
    feed_p99: float
    received: int
    expected: int
    api_cpu: float
    scheduler_cpu: float
    emitter_cpu: float
    clients_cpu: float  # this process: the SSE clients and the feed probe


async def run_round(
    *,
    url: str,
    bus: redis.Redis,
    engine: sa.Engine,
    redis_url: str,
    job_ids: list[int],
    clients: int,
    steps: float,
    names: int,
    warmup: float,
    seconds: float,
    api: psutil.Process,
    scheduler: psutil.Process,
) -> Round:
    host, port = url.removeprefix("http://").split(":")
    paths = [f"/api/v1/jobs/{job_ids[i % len(job_ids)]}/stream" for i in range(clients)]
    sse = Clients(host, int(port), paths)
    tasks = []
    for path in paths:  # a few at a time, as viewers arrive
        tasks.append(asyncio.create_task(sse.one(path)))
        await asyncio.sleep(0.005)
    deadline = time.monotonic() + 60
    while sse.opened < clients:
        assert time.monotonic() < deadline, f"only {sse.opened} streams opened"
        for task in tasks:
            if task.done() and task.exception():
                raise task.exception()  # type: ignore[misc]
        await asyncio.sleep(0.1)

    feed_samples: list[tuple[float, float]] = []
    feed_probe = asyncio.create_task(follow_feed(redis_url, job_ids[0], feed_samples, sse.stop))
    emitter = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--emit",
            "--redis",
            redis_url,
            "--job-ids",
            ",".join(map(str, job_ids)),
            "--steps",
            str(steps),
            "--names",
            str(names),
            "--seconds",
            str(warmup + seconds + 1.0),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    emitter_process = psutil.Process(emitter.pid)
    assert emitter.stdout is not None
    ready = await asyncio.to_thread(emitter.stdout.readline)
    assert "ready" in ready, f"the emitter did not start: {ready!r}"
    await asyncio.sleep(warmup)
    # Nor in this process over the window: its samples (half a million arrivals) made full
    # collections of 100-150 ms that held back the arrival stamps of every client at once.
    gc.freeze()
    gc.disable()
    try:
        t0, first = time.time(), newest_id(engine)
        me = psutil.Process()
        cpu0 = (cpu(api), cpu(scheduler), cpu(emitter_process), cpu(me))
        lags = []  # the ingest's backlog, once a second
        while time.time() < t0 + seconds:
            lags.append(unread(bus))
            await asyncio.sleep(min(1.0, max(0.0, t0 + seconds - time.time())))
        t1 = time.time()
        cpu1 = (cpu(api), cpu(scheduler), cpu(emitter_process), cpu(me))
        stored, backlog = stored_after(engine, first), unread(bus)
        t_stored = time.time()
        out, _ = await asyncio.to_thread(emitter.communicate)
        timeline = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        # Points emitted within [t0, t1], from the emitter's once-a-second counts.
        emitted = _between(timeline, t0, t1)
        # The window's points still on their way to the clients: wait for them (bounded).
        expected = int(round(emitted / len(job_ids) * clients))
        wait_until = time.monotonic() + 15
        while time.monotonic() < wait_until:
            got = sum(1 for emit_at, _ in sse.samples if t0 <= emit_at <= t1)
            if got >= expected:
                break
            await asyncio.sleep(0.2)
        sse.stop.set()
    finally:
        gc.enable()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, feed_probe, return_exceptions=True)
    feed = [(at - emit_at) * 1000 for emit_at, at in feed_samples if t0 <= emit_at <= t1]
    window = [(at - emit_at) * 1000 for emit_at, at in sse.samples if t0 <= emit_at <= t1]
    span = t1 - t0
    return Round(
        jobs=len(job_ids),
        offered=emitted / span,
        stored=stored / (t_stored - t0),
        backlog=backlog,
        lags=lags,
        p50=percentile(window, 0.50) if window else float("nan"),
        p99=percentile(window, 0.99) if window else float("nan"),
        feed_p50=percentile(feed, 0.5) if feed else float("nan"),
        feed_p99=percentile(feed, 0.99) if feed else float("nan"),
        received=len(window),
        expected=expected,
        api_cpu=(cpu1[0] - cpu0[0]) / span,
        scheduler_cpu=(cpu1[1] - cpu0[1]) / span,
        emitter_cpu=(cpu1[2] - cpu0[2]) / span,
        clients_cpu=(cpu1[3] - cpu0[3]) / span,
    )


def _between(timeline: list[dict[str, Any]], t0: float, t1: float) -> float:
    """Points emitted between t0 and t1, interpolated from (t, cumulative) samples."""

    def at(t: float) -> float:
        before = [s for s in timeline if s["t"] <= t]
        after = [s for s in timeline if s["t"] > t]
        if not before:
            return 0.0
        if not after:
            return float(before[-1]["points"])
        a, b = before[-1], after[0]
        return a["points"] + (b["points"] - a["points"]) * (t - a["t"]) / (b["t"] - a["t"])

    return at(t1) - at(t0)


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/13")
    parser.add_argument("--jobs", default="10,50,200", help="N values, comma-separated")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--steps", type=float, default=25.0, help="steps a second a replica")
    parser.add_argument("--names", type=int, default=5, help="metric names a step")
    parser.add_argument("--seconds", type=float, default=20.0, help="the measured window")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--quick", action="store_true", help="a 8 s window, 3 s warm-up")
    parser.add_argument(
        "--tree", type=Path, default=ROOT, help="run the api and scheduler of this checkout"
    )
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="write the api's and the scheduler's cProfile stats here",
    )
    # The emitter's own arguments (this script runs itself as the emitter).
    parser.add_argument("--emit", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--job-ids", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.warmup = 8.0, 3.0
    return args


def run_side(args: argparse.Namespace, tree: Path) -> list[Round]:
    """A fresh database, api and scheduler of `tree`; one round per N of `--jobs`."""
    sizes = [int(n) for n in args.jobs.split(",")]
    # Here, not at the top: the emitter (this script again) needs none of it.
    from tests.conftest import create_database, drop_database

    bus = redis.Redis.from_url(args.redis, decode_responses=True)
    bus.flushdb()
    name = f"telemetry_load_{os.getpid()}"
    db_url = create_database(name)
    os.environ["COHORT_DATABASE_URL"] = db_url
    data = Path(f"/tmp/{name}")
    data.mkdir(exist_ok=True)
    engine = sa.create_engine(db_url)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        jobs_of, all_jobs = {}, make_jobs(sum(sizes))
        for n in sizes:
            jobs_of[n], all_jobs = all_jobs[:n], all_jobs[n:]
        port = processes.free_port()
        env = {
            **os.environ,
            "COHORT_DATABASE_URL": db_url,
            "COHORT_REDIS_URL": args.redis,
            "COHORT_DATA_DIR": str(data),
            "COHORT_API_PORT": str(port),
            "COHORT_MAX_STREAMS_PER_TOKEN": str(args.clients + 10),
            "COHORT_NODE_ID": "bench",
            # The scheduler signs what it sends agents; none runs here.
            "COHORT_SIGNING_KEY": os.environ.get("COHORT_SIGNING_KEY") or "b" * 64,
        }
        log = data / "services.log"
        api = start_service(tree, ["api", "--port", str(port)], env, log, args.profile)
        scheduler = start_service(tree, ["scheduler"], env, log, args.profile)
        procs = [api, scheduler]
        url = f"http://127.0.0.1:{port}"
        processes.wait_healthy(url, {"api": api, "scheduler": scheduler})
        print(
            f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; "
            f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}; tree {tree}; "
            f"{args.clients} SSE clients; each replica {args.steps:g} steps/s x "
            f"{args.names} names, flushed every {FLUSH} s; window {args.seconds:g} s "
            f"after {args.warmup:g} s",
            flush=True,
        )
        return [one_size(args, url, bus, engine, jobs_of[n], api.pid, scheduler.pid) for n in sizes]
    finally:
        processes.stop(*procs)
        engine.dispose()
        drop_database(name)
        shutil.rmtree(data, ignore_errors=True)


def one_size(
    args: argparse.Namespace,
    url: str,
    bus: redis.Redis,
    engine: sa.Engine,
    job_ids: list[int],
    api: int,
    scheduler: int,
) -> Round:
    load_before = os.getloadavg()[0]
    result = asyncio.run(
        run_round(
            url=url,
            bus=bus,
            engine=engine,
            redis_url=args.redis,
            job_ids=job_ids,
            clients=args.clients,
            steps=args.steps,
            names=args.names,
            warmup=args.warmup,
            seconds=args.seconds,
            api=psutil.Process(api),
            scheduler=psutil.Process(scheduler),
        )
    )
    print(
        f"N={len(job_ids)}: {result} (load average {load_before:.1f} -> {os.getloadavg()[0]:.1f})",
        flush=True,
    )
    # Let the ingest drain before the next N.
    deadline = time.monotonic() + 60
    while unread(bus) and time.monotonic() < deadline:
        time.sleep(0.5)
    return result


def print_table(rounds: list[Round]) -> None:
    print()
    print(
        "| N jobs | emitted /s | stored /s | unread at the end | emit -> SSE p50 | p99 "
        "| received / expected | api CPU | scheduler CPU |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rounds:
        print(
            f"| {r.jobs} | {r.offered:,.0f} | {r.stored:,.0f} | {r.backlog} | "
            f"{r.p50:.0f} ms | {r.p99:.0f} ms | {r.received:,} / {r.expected:,} | "
            f"{r.api_cpu:.0%} | {r.scheduler_cpu:.0%} |"
        )
    print("targets: >= 50,000 points/s stored, sustained, with p99 <= 250 ms")


def main() -> None:
    args = arguments()
    if args.emit:
        emit(
            args.redis,
            [int(j) for j in args.job_ids.split(",")],
            args.steps,
            args.names,
            args.seconds,
        )
        return
    # A `timeout` (SIGTERM) still stops the services and drops the database.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print_table(run_side(args, args.tree))


if __name__ == "__main__":
    main()
