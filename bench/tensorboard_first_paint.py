"""`cohort tensorboard JOB` to first paint: from the command's start to TensorBoard
answering the scalars of a job of 100,000 points (its last step among them).

Set up once, not timed: the api of a stack alone (SQLite and an embedded Redis under a
temporary DATA_DIR), a job submitted to it (it stays queued: no scheduler, no agent), and
the job's event file written by TensorFlow's summary writer straight into the artifact
store where the agent would have copied it (`jobs/<id>/tensorboard/replica-0/`): a real
job of 100,000 steps is minutes of training for the same bytes.

Each round, side by side, in turns:
  (a) `cohort tensorboard JOB --port P --logdir <empty dir>` (the installed command, with
      COHORT_URL and COHORT_TOKEN): the fetch through the API, then TensorBoard;
  (b) TensorBoard alone on a local copy of the same files (`python -m tensorboard.main
      --logdir`): its own start and load, the floor (a) stands on.
Both are timed to the first answer of /data/plugin/scalars/scalars that holds the last
step. Medians of each, and the median of per-round ratios a / b.

    .venv/bin/python bench/tensorboard_first_paint.py [--points 100000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cli.stack import Stack  # noqa: E402
from cohort.client import Client  # noqa: E402
from services.storage import keys  # noqa: E402
from services.storage.store import open_store  # noqa: E402
from tests.e2e.conftest import free_port  # noqa: E402

COHORT = str(Path(sys.executable).parent / "cohort")
WRITE = r"""
import sys
import tensorflow as tf
from tensorboard.plugins.scalar import metadata

directory, points = sys.argv[1], int(sys.argv[2])
writer = tf.summary.create_file_writer(directory, max_queue=10_000)
# What tf.summary.scalar("loss", ...) writes, its tag as given: inside a tf.function's
# loop, tf.summary.scalar would name it "while/loss".
scalar = metadata.create_summary_metadata(display_name="loss", description="")


@tf.function
def write(n):
    for step in tf.range(n, dtype=tf.int64):
        value = 1.0 / tf.cast(step + 1, tf.float32)
        tf.summary.write("loss", value, step=step, metadata=scalar.SerializeToString())


with writer.as_default():
    write(tf.constant(points, tf.int64))
writer.flush()
"""


def write_events(directory: Path, points: int) -> None:
    """`points` steps of one scalar, written by TensorFlow into `directory` (a script in a
    file: AutoGraph reads the loop's source)."""
    script = directory.parent / "write_events.py"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(WRITE)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    subprocess.run([sys.executable, str(script), str(directory), str(points)], env=env, check=True)
    script.unlink()


def until_painted(process: subprocess.Popen[bytes], port: int, run: str, last: int) -> float:
    """Seconds until TensorBoard on `port` answers the scalars of `run` with step `last`."""
    url = f"http://localhost:{port}/data/plugin/scalars/scalars"
    began = time.monotonic()
    while time.monotonic() - began < 300:
        if process.poll() is not None:
            raise RuntimeError(f"exited {process.returncode} before answering")
        try:
            points = httpx.get(url, params={"run": run, "tag": "loss"}, timeout=5).json()
            if points and points[-1][1] == last:
                return time.monotonic() - began
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.05)
    raise TimeoutError(f"no answer from {url} within 300 s")


def timed(argv: list[str], env: dict[str, str], port: int, run: str, last: int) -> float:
    process = subprocess.Popen(
        argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        return until_painted(process, port, run, last)
    finally:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cohort-bench-board-"))
    work.chmod(0o711)
    stack = Stack(
        {
            "COHORT_DATABASE_URL": "",
            "COHORT_REDIS_URL": "",
            "COHORT_EMBEDDED_REDIS_PORT": str(free_port()),
            "COHORT_API_PORT": str(free_port()),
            "COHORT_DATA_DIR": str(work / "data"),
            "COHORT_BOOTSTRAP_TOKEN": "bench-bootstrap-token-for-this-only",
        },
        quiet=True,
    )
    try:
        stack.start(("api",))
        client = Client(stack.url, stack.token)
        job = client.submit({"name": "bench-board", "replicas": 1, "strategy": "one_device"})
        run = f"job-{job['id']}/replica-0"
        local = work / "local"
        began = time.monotonic()
        write_events(local / run, args.points)
        [events] = list((local / run).iterdir())
        print(
            f"{args.points:,} points: {events.stat().st_size / 1e6:.1f} MB of events, "
            f"written in {time.monotonic() - began:.1f} s"
        )
        store = open_store(settings=stack.settings)
        store.put_file(f"{keys.tensorboard_prefix(job['id'], 0)}/{events.name}", events)
        env = {key: value for key, value in os.environ.items() if not key.startswith("COHORT_")}
        env |= {"COHORT_URL": stack.url, "COHORT_TOKEN": stack.token}
        # This checkout's command; TensorFlow's start-up talk off for both, as the CLI does.
        env |= {"PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
        ours, floor, ratios = [], [], []
        for round_ in range(args.rounds):
            port = free_port()
            logdir = work / f"fetched-{round_}"
            argv = [COHORT, "tensorboard", str(job["id"]), "--port", str(port)]
            a = timed([*argv, "--logdir", str(logdir)], env, port, run, args.points - 1)
            port = free_port()
            argv = [sys.executable, "-m", "tensorboard.main", "--logdir", str(local)]
            b = timed([*argv, "--port", str(port)], env, port, run, args.points - 1)
            ours.append(a)
            floor.append(b)
            ratios.append(a / b)
            print(f"round {round_ + 1}: cohort tensorboard {a:.2f} s, tensorboard alone {b:.2f} s")
        print(
            f"median of {args.rounds}: cohort tensorboard {statistics.median(ours):.2f} s, "
            f"tensorboard alone {statistics.median(floor):.2f} s; median of per-round "
            f"ratios {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
        )
    finally:
        stack.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
