"""What `cohort.report()` costs a custom training loop's step (issue 33).

A custom loop (`tf.GradientTape` in a `tf.function`, a small MLP on random data, as a
`command` job's script would have it) runs `--steps` steps per side, three sides
interleaved round by round:

- none: no reporting;
- sync: the report() before issue 33 (a copy below): each call reads its tensors
  (`float()`), encodes its JSON line and writes it, on the training thread;
- queued: cohort/metrics.py's report(): checks, and appends to a deque; the writer
  thread (cohort/report_queue.py) reads the tensors, encodes and writes in batches.

Each step reports `loss` and `accuracy` as the step returned them (scalar tensors).
Reported per side: wall time per step, the training thread's CPU per step (the work
that sits on the step), the process's CPU per step (all of it, the writer thread's
included: what moved off the step is still paid), and per round the ratio of each
side's wall step to none's, with the median of those ratios.

    .venv/bin/python bench/report_cost.py [--steps 3000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cohort import metrics  # noqa: E402

SIDES = ("none", "sync", "queued")


def sync_report(fd: int, step: int, **values: Any) -> None:
    """report() as it was: every value read, the line encoded and written, here."""
    step, checked = metrics.check(step, values)
    numbers = {name: metrics._number(name, value) for name, value in checked.items()}
    record = {"step": step, "metrics": numbers, "ts": time.time()}
    os.write(fd, (json.dumps(record, allow_nan=False, separators=(",", ":")) + "\n").encode())


def make_step() -> Any:
    import tensorflow as tf

    tf.random.set_seed(0)
    w1 = tf.Variable(tf.random.normal([64, 64], stddev=0.1))
    w2 = tf.Variable(tf.random.normal([64, 10], stddev=0.1))
    x = tf.random.normal([64, 64])
    y = tf.random.uniform([64], maxval=10, dtype=tf.int32)
    optimizer = tf.keras.optimizers.SGD(0.01)

    @tf.function
    def step() -> tuple[Any, Any]:
        with tf.GradientTape() as tape:
            logits = tf.nn.relu(x @ w1) @ w2
            loss = tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
            )
        grads = tape.gradient(loss, [w1, w2])
        optimizer.apply_gradients(zip(grads, [w1, w2], strict=True))
        hits = tf.cast(tf.equal(tf.argmax(logits, 1, output_type=tf.int32), y), tf.float32)
        return loss, tf.reduce_mean(hits)

    return step


def run_side(side: str, step_fn: Any, steps: int, directory: Path) -> dict[str, float]:
    path = directory / f"{side}-{time.monotonic_ns()}.jsonl"
    os.environ[metrics.ENV_VAR] = str(path)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    wall, thread, cpu = time.perf_counter(), time.thread_time(), time.process_time()
    for number in range(1, steps + 1):
        loss, accuracy = step_fn()
        if side == "sync":
            sync_report(fd, number, loss=loss, accuracy=accuracy)
        elif side == "queued":
            metrics.report(number, loss=loss, accuracy=accuracy)
    metrics.flush()  # what the writer had not written yet is the steps' cost too
    wall = time.perf_counter() - wall
    thread, cpu = time.thread_time() - thread, time.process_time() - cpu
    os.close(fd)
    if side != "none":
        lines = path.read_text().splitlines()
        assert len(lines) == steps, (side, len(lines))  # every step's point written
    return {"wall": wall / steps * 1e6, "thread": thread / steps * 1e6, "cpu": cpu / steps * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    step_fn = make_step()
    results: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        for side in SIDES:  # warm-up: tracing, the first writes
            run_side(side, step_fn, 200, directory)
        for run in range(args.rounds):
            order = SIDES[run % 3 :] + SIDES[: run % 3]
            for side in order:
                results[side].append(run_side(side, step_fn, args.steps, directory))
    med = statistics.median
    print(
        f"# {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, load "
        f"{os.getloadavg()[0]:.1f}; {args.steps} steps x {args.rounds} interleaved rounds"
    )
    print("| side | wall µs/step | training thread CPU µs/step | process CPU µs/step |")
    print("|---|---|---|---|")
    for side in SIDES:
        cells = [f"{med(r[key] for r in results[side]):.1f}" for key in ("wall", "thread", "cpu")]
        print(f"| {side} | " + " | ".join(cells) + " |")
    for side in ("sync", "queued"):
        for key in ("wall", "thread"):
            ratios = [r[key] / n[key] for n, r in zip(results["none"], results[side], strict=True)]
            print(
                f"{side} / none per round, {key}: "
                + ", ".join(f"{x:.3f}" for x in ratios)
                + f" (median {med(ratios):.3f})"
            )


if __name__ == "__main__":
    main()
