"""Real TensorBoard event files for tests: a TensorFlow subprocess writes them.

One script for the tests of the agent's readers, so what they parse is what
tf.summary really writes (TF2 tensors with the `scalars` plugin, a histogram,
a TF1-style `simple_value`, runs in subdirectories as Keras' TensorBoard writes).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

SCRIPT = r"""
import os, sys, time
import tensorflow as tf

root, steps, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
report = None
if os.environ.get("COHORT_METRICS_FILE"):
    from cohort import report
writers = {run: tf.summary.create_file_writer(os.path.join(root, run))
           for run in ("", "train", "validation")}
for step in range(steps):
    with writers[""].as_default(step=step):
        tf.summary.scalar("loss", 1.0 / (step + 1))
        tf.summary.scalar("lr64", tf.constant(0.5 ** step, tf.float64))
        tf.summary.histogram("weights", [0.1, 0.2, float(step)])
        legacy = tf.compat.v1.Summary(
            value=[tf.compat.v1.Summary.Value(tag="legacy", simple_value=2.5 * step)])
        tf.summary.experimental.write_raw_pb(legacy.SerializeToString())
    for run, offset in (("train", 0.25), ("validation", 0.75)):
        with writers[run].as_default(step=step):
            tf.summary.scalar("epoch_loss", step + offset)
    for writer in writers.values():
        writer.flush()
    if report is not None:
        report(step, accuracy=step / 10, examples=step * 32)
    time.sleep(pause)
"""


def expected_scalars(steps: int) -> set[tuple[int, str, float]]:
    """(step, name, value) of every scalar SCRIPT writes (float32 where TF stores float32)."""
    found = set()
    for step in range(steps):
        found |= {
            (step, "loss", float(np.float32(1.0 / (step + 1)))),
            (step, "lr64", 0.5**step),
            (step, "legacy", float(np.float32(2.5 * step))),
            (step, "train/epoch_loss", float(np.float32(step + 0.25))),
            (step, "validation/epoch_loss", float(np.float32(step + 0.75))),
        }
    return found


def expected_reports(steps: int) -> set[tuple[int, str, float]]:
    """(step, name, value) of every point SCRIPT reports with cohort.report()."""
    return {
        point
        for step in range(steps)
        for point in ((step, "accuracy", step / 10), (step, "examples", float(step * 32)))
    }


def start_writer(
    directory: Path, steps: int, pause: float = 0.0, metrics_file: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start SCRIPT writing `steps` steps of summaries under `directory`."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    env.pop("COHORT_METRICS_FILE", None)
    if metrics_file is not None:
        env["COHORT_METRICS_FILE"] = str(metrics_file)
    return subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(directory), str(steps), str(pause)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def write_summaries(directory: Path, steps: int) -> None:
    """Write `steps` steps of summaries under `directory` and wait for the writer."""
    process = start_writer(directory, steps)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr.decode(errors="replace")[-2000:]
