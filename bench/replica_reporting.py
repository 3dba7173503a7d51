"""What reporting costs a training step.

(1) The Keras callback per batch, old vs new, interleaved in one run: µs per batch
    through tf_keras's own `CallbackList` (what `fit` calls), with the logs as `fit`
    hands them (a dict of scalar tensors: loss, accuracy), for
    - none: no callback of ours (a plain script: Keras skips the batch hooks);
    - old: the callback before issue 18 (a copy below): Keras converts the logs to
      numpy each batch, then 4 `add()`s (float, finite check, lock), a beat check and
      a maybe-flush, all on the training thread;
    - new: workers/replica/callbacks.py: one `StepRecord` appended to a deque; the
      sender thread converts and writes every flush interval.
    "thread" is the CPU time per batch of the calling (training) thread (CPU, not wall
    time: the machine is shared, and a tight loop would also count the sender holding
    the GIL, which a real step, mostly in TensorFlow's C++, does not wait for);
    "process" the CPU time of the whole process per batch, the final flush and the
    sender's work included: what moved off the training thread is still paid, elsewhere.
(2) The sinks (issue 14): the reporter's pattern per step against the replica's metrics
    file vs. Redis directly, and how long the agent takes to read back what was written.

    .venv/bin/python bench/replica_reporting.py [--batches 10000] [--rounds 5] \
        [--redis redis://127.0.0.1:6379/15 --steps 200000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from services.wire.keys import METRICS_STREAM, PROGRESS_HASH  # noqa: E402
from workers.node.report_shipper import MetricReporter, MetricsFileReader  # noqa: E402
from workers.point_buffer import PointBuffer  # noqa: E402
from workers.replica.callbacks import metrics_callback  # noqa: E402
from workers.replica.report_writer import ReplicaReporter  # noqa: E402

GLOBAL_BATCH = 64


@functools.cache
def legacy_callback_class() -> type:
    """The metrics callback as it was before issue 18, per batch (for comparison)."""
    import tf_keras as keras

    class LegacyMetricsCallback(keras.callbacks.Callback):
        def __init__(self, reporter: PointBuffer, global_batch_size: int) -> None:
            super().__init__()
            self._reporter = reporter
            self._global_batch_size = global_batch_size
            self._steps_per_epoch: int | None = None
            self._epoch = 0
            self._last_batch_end = time.perf_counter()

        def on_train_begin(self, logs: Any = None) -> None:
            self._steps_per_epoch = (self.params or {}).get("steps")

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            now = time.perf_counter()
            step_time = now - self._last_batch_end
            self._last_batch_end = now
            step = self._epoch * (self._steps_per_epoch or 0) + batch + 1
            add, ts = self._reporter.add, time.time()
            for name, value in (logs or {}).items():
                add(step, self._epoch, name, value, ts)
            add(step, self._epoch, "step_time", step_time, ts)
            if step_time > 0:
                add(step, self._epoch, "examples_per_sec", self._global_batch_size / step_time, ts)
            self._reporter.beat()
            self._reporter.maybe_flush()

    return LegacyMetricsCallback


def callback_list(kind: str, reporter: PointBuffer, batches: int) -> Any:
    """tf_keras's CallbackList as `fit` builds it (History added, verbose=0)."""
    import tf_keras as keras

    callbacks = {
        "none": [],
        "old": [legacy_callback_class()(reporter, GLOBAL_BATCH)],
        "new": [metrics_callback(reporter, GLOBAL_BATCH)],
    }[kind]
    listed = keras.callbacks.CallbackList(
        callbacks,
        add_history=True,
        add_progbar=False,
        model=keras.Sequential(),
        epochs=1,
        steps=batches,
        verbose=0,
    )
    listed.on_train_begin()
    listed.on_epoch_begin(0)
    return listed


def batch_cost(kind: str, batches: int, directory: Path) -> tuple[float, float]:
    """(training thread CPU µs, process CPU µs) per batch of `fit`'s callback calls."""
    import tensorflow as tf

    # A new dict of tensors per batch, as the train function returns one.
    logs = [
        {"loss": tf.constant(1.0 / (i + 1)), "accuracy": tf.constant(0.5)} for i in range(batches)
    ]
    reporter = ReplicaReporter(
        directory / f"{kind}-{time.monotonic_ns()}.jsonl", job_id=1, attempt=1, replica=0
    )
    listed = callback_list(kind, reporter, batches)
    cpu, thread = time.process_time(), time.thread_time()
    for batch in range(batches):
        listed.on_train_batch_begin(batch)
        listed.on_train_batch_end(batch, logs[batch])
    thread = time.thread_time() - thread
    reporter.flush()  # what the sender had not shipped yet is the step's cost too
    cpu = time.process_time() - cpu
    reporter.close()
    return thread / batches * 1e6, cpu / batches * 1e6


def callback_costs(batches: int, rounds: int) -> None:
    kinds = ("none", "old", "new")
    results: dict[str, list[tuple[float, float]]] = {kind: [] for kind in kinds}
    with tempfile.TemporaryDirectory() as directory:
        for kind in kinds:  # warm-up: TensorFlow's first calls, tf_keras's timing check
            batch_cost(kind, 200, Path(directory))
        for _ in range(rounds):
            for kind in kinds:
                results[kind].append(batch_cost(kind, batches, Path(directory)))
    med: Callable[[list[float]], float] = statistics.median
    print(
        f"(1) callback per batch, {batches} batches, median of {rounds} "  # noqa: T201
        "interleaved rounds"
    )
    print("| | training thread CPU µs/batch | process CPU µs/batch |")  # noqa: T201
    print("|---|---|---|")  # noqa: T201
    for kind in kinds:
        thread = med([r[0] for r in results[kind]])
        cpu = med([r[1] for r in results[kind]])
        print(f"| {kind} | {thread:.2f} | {cpu:.2f} |")  # noqa: T201


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


def sink_costs(steps_count: int, redis_url: str | None) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "metrics.jsonl"
        file_reporter = ReplicaReporter(path, job_id=1, attempt=1, replica=0)
        per_step = steps(file_reporter, steps_count)
        file_reporter.close()
        size = path.stat().st_size
        reader = MetricsFileReader(path)
        started = time.perf_counter()
        points = 0
        while batch := reader.read():
            points += len(batch)
        read_seconds = time.perf_counter() - started
        print(
            f"(2a) metrics file: {per_step:.2f} us/step; {size / steps_count:.0f} "  # noqa: T201
            f"bytes/step; the agent reads {points / read_seconds:,.0f} points/s "
            f"({read_seconds / steps_count * 1e6:.2f} us per step written)"
        )
    if redis_url is None:
        return
    client = redis.Redis.from_url(redis_url)
    client.delete(METRICS_STREAM, PROGRESS_HASH)
    redis_reporter = MetricReporter.from_url(redis_url, job_id=1, attempt=1, replica=0)
    per_step = steps(redis_reporter, steps_count)
    redis_reporter.close()
    client.delete(METRICS_STREAM, PROGRESS_HASH)
    print(f"(2b) Redis XADD:   {per_step:.2f} us/step")  # noqa: T201


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--redis", default=None, help="also time (2b), on this Redis")
    parser.add_argument("--steps", type=int, default=200_000)
    args = parser.parse_args()
    print(
        f"# {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, "  # noqa: T201
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}"
    )
    callback_costs(args.batches, args.rounds)
    sink_costs(args.steps, args.redis)


if __name__ == "__main__":
    main()
