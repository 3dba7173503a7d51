"""End to end, on a user's path: a small job writes TensorBoard scalars and a profile with
`tf.summary` and `tf.profiler` (no Cohort import); the installed `cohort tensorboard JOB`,
started while the job is queued, with COHORT_URL and COHORT_TOKEN in its environment,
prints TensorBoard's address, and TensorBoard's own HTTP API then serves the job's
scalars, the same as the job's stored metrics; the profile is in the run's directory;
Ctrl-C stops TensorBoard and the command exits 0."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import textwrap
import threading
import time
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from cli.client import CohortClient
from cli.stack import Stack
from services.storage import keys
from services.storage.store import open_store
from tests.e2e.conftest import free_port, wait_for, wait_terminal
from tests.e2e.test_user_code import COHORT, failure_of, submit

pytestmark = pytest.mark.e2e

STEPS = 20
STOP_WITHIN = 15  # seconds from Ctrl-C to the command gone, TensorBoard with it

TRAIN = textwrap.dedent("""
    import os
    import sys
    import time

    import tensorflow as tf

    steps, board = int(sys.argv[1]), os.environ["COHORT_TENSORBOARD_DIR"]
    writer = tf.summary.create_file_writer(board)
    with writer.as_default():
        for step in range(1, steps + 1):
            if step == 3:
                tf.profiler.experimental.start(board)
            tf.summary.scalar("loss", 1.0 / step, step=step)
            if step == 4:
                tf.profiler.experimental.stop()
            writer.flush()
            time.sleep(0.05)
""")


def lines_of(stream: IO[str]) -> queue.Queue[str | None]:
    """The stream's lines as they come (None at its end), read by a thread."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        for line in stream:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


def address_in(lines: queue.Queue[str | None], timeout: float, seen: list[str]) -> str:
    """The address of the line `TensorBoard at URL : ...`, waited for."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        if line is None:
            break
        seen.append(line)
        if found := re.match(r"TensorBoard at (http://\S+)", line):
            return found.group(1)
    raise AssertionError("no address line:\n" + "\n".join(seen))


def _ctrl_c_as_in_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_cohort_tensorboard_serves_a_jobs_scalars_and_profile(
    pg_stack: tuple[Stack, CohortClient], tmp_path: Path
) -> None:
    stack, client = pg_stack
    code = tmp_path / "project"
    code.mkdir()
    (code / "train.py").write_text(TRAIN)
    spec = {
        "name": "board",
        "command": ["python", "train.py", str(STEPS)],
        "replicas": 1,
        "strategy": "one_device",
        "restart_policy": "never",
    }
    job_id = submit(stack, tmp_path, spec, code)
    port, logdir = free_port(), tmp_path / "board"
    env = {key: value for key, value in os.environ.items() if not key.startswith("COHORT_")}
    env |= {"COHORT_URL": stack.url, "COHORT_TOKEN": stack.token, "COLUMNS": "200"}
    argv = [COHORT, "tensorboard", str(job_id), "--port", str(port), "--logdir", str(logdir)]
    process = subprocess.Popen(
        [*argv, "--every", "1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        # As from a terminal, where Ctrl-C reaches it: a job a non-interactive shell starts
        # in the background (CI's `make test`) inherits SIGINT ignored, and so would this.
        preexec_fn=_ctrl_c_as_in_a_terminal,  # noqa: PLW1509 - one call, no lock taken
    )
    seen: list[str] = []
    try:
        lines = lines_of(process.stdout)  # type: ignore[arg-type]
        address = address_in(lines, 120, seen)
        assert address == f"http://localhost:{port}/", seen
        final = wait_terminal(client, job_id, timeout=120)
        assert final["status"] == "succeeded", failure_of(client, job_id)
        run = f"job-{job_id}/replica-0"
        served = wait_for(
            lambda: _scalars(address, run, "loss", STEPS),
            60,
            f"TensorBoard to serve {STEPS} points of {run}",
            interval=0.5,
        )
        tb = httpx.get(f"{address}data/runs", timeout=10).json()
        assert run in tb, tb
        tags = httpx.get(f"{address}data/plugin/scalars/tags", timeout=10).json()
        assert "loss" in tags[run], tags
        stored = {p["step"]: p["value"] for p in client.metrics(job_id, name=["loss"])}
        assert sorted(stored) == list(range(1, STEPS + 1))
        assert {step: value for _, step, value in served} == pytest.approx(stored)
        # The profile came with the run, byte for byte.
        [profile] = list((logdir / run / "plugins" / "profile").glob("*/*.xplane.pb"))
        key = f"{keys.tensorboard_prefix(job_id, 0)}/{profile.relative_to(logdir / run).as_posix()}"
        with open_store(settings=stack.settings).open_read(key) as handle:
            assert profile.read_bytes() == handle.read()
    finally:
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C
        try:
            stopped: int | None = process.wait(timeout=STOP_WITHIN)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            stopped = None
    assert stopped == 0, f"not stopped by Ctrl-C within {STOP_WITHIN}s:\n" + "\n".join(seen)
    with pytest.raises(httpx.ConnectError):  # TensorBoard went with it
        httpx.get(f"{address}data/runs", timeout=5)


def _scalars(address: str, run: str, tag: str, steps: int) -> list[Any] | None:
    """TensorBoard's points of `tag` in `run`, once it has all `steps` of them."""
    try:
        response = httpx.get(
            f"{address}data/plugin/scalars/scalars", params={"run": run, "tag": tag}, timeout=10
        )
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    points: list[Any] = response.json()
    return points if len(points) == steps else None
