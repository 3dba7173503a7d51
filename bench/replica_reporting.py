"""What reporting costs a training step: the replica's metrics file vs. Redis directly.

A step of the Keras callback (workers/replica/callbacks.py) adds 4 points (loss,
accuracy, step_time, examples_per_sec), beats and maybe-flushes. This times that loop,
in one process, for:

(a) `ReplicaReporter`: the runner's reporter since issue 14, appending lines to the
    replica's metrics file (the agent ships them);
(b) `MetricReporter` on a local Redis: what the runner did before (XADD every 0.25 s,
    HSET a beat a second).

and, for (a), how long the agent takes to read and decode what one second of steps wrote.

    .venv/bin/python bench/replica_reporting.py --redis redis://127.0.0.1:6379/15 [--steps 200000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from services.wire.keys import METRICS_STREAM, PROGRESS_HASH  # noqa: E402
from workers.node.report_file import MetricsFileReader  # noqa: E402
from workers.replica.report_channel import ReplicaReporter  # noqa: E402
from workers.reporter import MetricReporter  # noqa: E402
from workers.reporting import PointBuffer  # noqa: E402


def steps(reporter: PointBuffer, count: int) -> float:
    """Microseconds per step of the callback's pattern."""
    started = time.perf_counter()
    for step in range(1, count + 1):
        ts = time.time()
        reporter.add(step, 0, "loss", 1.0 / step, ts)
        reporter.add(step, 0, "accuracy", 0.5, ts)
        reporter.add(step, 0, "step_time", 0.01, ts)
        reporter.add(step, 0, "examples_per_sec", 3200.0, ts)
        reporter.beat()
        reporter.maybe_flush()
    reporter.flush()
    return (time.perf_counter() - started) / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/15")
    parser.add_argument("--steps", type=int, default=200_000)
    args = parser.parse_args()
    print(f"# {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, "  # noqa: T201
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}, {args.steps} steps")
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "metrics.jsonl"
        file_reporter = ReplicaReporter(path, job_id=1, attempt=1, replica=0)
        per_step = steps(file_reporter, args.steps)
        file_reporter.close()
        size = path.stat().st_size
        reader = MetricsFileReader(path)
        started = time.perf_counter()
        points = 0
        while batch := reader.read():
            points += len(batch)
        read_seconds = time.perf_counter() - started
        print(f"(a) metrics file: {per_step:.2f} us/step; {size / args.steps:.0f} "  # noqa: T201
              f"bytes/step; the agent reads {points / read_seconds:,.0f} points/s "
              f"({read_seconds / args.steps * 1e6:.2f} us per step written)")
    client = redis.Redis.from_url(args.redis)
    client.delete(METRICS_STREAM, PROGRESS_HASH)
    redis_reporter = MetricReporter.from_url(args.redis, job_id=1, attempt=1, replica=0)
    per_step = steps(redis_reporter, args.steps)
    redis_reporter.close()
    client.delete(METRICS_STREAM, PROGRESS_HASH)
    print(f"(b) Redis XADD:   {per_step:.2f} us/step")  # noqa: T201


if __name__ == "__main__":
    main()
