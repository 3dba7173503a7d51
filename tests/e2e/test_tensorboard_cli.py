"""End to end, on a user's path: a job writes TensorBoard scalars and a profile with
`tf.summary` and `tf.profiler` (no Cohort import), a step every 0.2 s; the installed
`cohort tensorboard JOB`, started as the job is submitted, with COHORT_URL and
COHORT_TOKEN in its environment, prints TensorBoard's address; TensorBoard's own HTTP
API serves some of the job's scalars while it still runs (copied by its agent, fetched,
read on by TensorBoard), and once it ended (cancelled, as soon as that was seen) all of
them, the same as the job's stored metrics; the profile is in the run's directory, byte
for byte; Ctrl-C stops TensorBoard and the command exits 0."""

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

from cli.stack import Stack
from cohort.client import Client
from services.storage import keys
from services.storage.store import open_store
from tests.e2e.conftest import free_port, pg_stack_with, wait_for, wait_terminal
from tests.e2e.test_user_code import COHORT, failure_of, submit

pytestmark = pytest.mark.e2e

STEPS = 600  # at most: the job is cancelled once TensorBoard has shown some of them
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
            time.sleep(0.2)
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


def test_cohort_tensorboard_follows_a_running_jobs_scalars_and_profile(tmp_path: Path) -> None:
    # The agent copies the running replica's files every second (10 s by default).
    with pg_stack_with(tmp_path, {"COHORT_TENSORBOARD_SYNC_INTERVAL": "1"}) as (stack, client):
        job_id = submit_job(stack, tmp_path)
        port = free_port()
        command = start_command(stack, tmp_path, job_id, port)
        seen: list[str] = []
        try:
            address = address_in(lines_of(command.stdout), 120, seen)  # type: ignore[arg-type]
            assert address == f"http://localhost:{port}/", seen
            check_served(stack, client, job_id, address, tmp_path / "board")
        finally:
            os.killpg(command.pid, signal.SIGINT)  # Ctrl-C
            try:
                stopped: int | None = command.wait(timeout=STOP_WITHIN)
            except subprocess.TimeoutExpired:
                os.killpg(command.pid, signal.SIGKILL)
                command.wait()
                stopped = None
    assert stopped == 0, f"not stopped by Ctrl-C within {STOP_WITHIN}s:\n" + "\n".join(seen)
    with pytest.raises(httpx.ConnectError):  # TensorBoard went with it
        httpx.get(f"{address}data/runs", timeout=5)


def submit_job(stack: Stack, tmp_path: Path) -> int:
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
    return submit(stack, tmp_path, spec, code)


def start_command(stack: Stack, tmp_path: Path, job_id: int, port: int) -> subprocess.Popen[str]:
    """`cohort tensorboard JOB --port P --logdir DIR --every 1` as a terminal starts it."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("COHORT_")}
    env |= {"COHORT_URL": stack.url, "COHORT_TOKEN": stack.token, "COLUMNS": "200"}
    argv = [COHORT, "tensorboard", str(job_id), "--port", str(port)]
    command = subprocess.Popen(
        [*argv, "--logdir", str(tmp_path / "board"), "--every", "1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        # As from a terminal, where Ctrl-C reaches it: a job a non-interactive shell starts
        # in the background (CI's `make test`) inherits SIGINT ignored, and so would this.
        preexec_fn=_ctrl_c_as_in_a_terminal,  # noqa: PLW1509 - one call, no lock taken
    )
    return command


def check_served(stack: Stack, client: Client, job_id: int, address: str, logdir: Path) -> None:
    """TensorBoard shows some points while the job runs, then (the job cancelled) all of
    them: its stored metrics; the profile came with the run."""
    run = f"job-{job_id}/replica-0"
    while_running = wait_for(
        lambda: (points := _scalars(address, run, "loss")) and (points, client.job(job_id)),
        120,
        f"TensorBoard to serve points of {run}",
        interval=0.5,
    )
    points, job = while_running
    assert job["status"] == "running", (job["status"], failure_of(client, job_id))
    assert 0 < len(points) < STEPS
    client.cancel(job_id)
    assert wait_terminal(client, job_id, timeout=60)["status"] == "cancelled"
    # A cancel ends the job at once; its replica writes on until its SIGTERM, and its last
    # files are stored, and its last points sent, before its exit is reported.
    wait_for(
        lambda: all(r["exit_code"] is not None for r in client.job(job_id)["replica_list"]),
        60,
        "the replica's exit",
    )

    def both() -> tuple[list[Any], dict[int, float]] | None:
        points = _scalars(address, run, "loss") or []
        rows = client.metrics(job_id, name=["loss"], limit=10_000)
        stored = {p["step"]: p["value"] for p in rows}
        return (points, stored) if len(points) == len(stored) else None

    served, stored = wait_for(
        both,
        60,
        f"TensorBoard to serve the points stored of {run}",
        interval=0.5,
        explain=lambda: (
            f"it serves {len(_scalars(address, run, 'loss') or [])}, "
            f"{len(client.metrics(job_id, name=['loss'], limit=10_000))} stored"
        ),
    )
    assert len(stored) > len(points)  # it went on after TensorBoard first showed it
    assert sorted(stored) == list(range(1, len(stored) + 1))
    assert {step: value for _, step, value in served} == pytest.approx(stored)
    assert run in httpx.get(f"{address}data/runs", timeout=10).json()
    tags = httpx.get(f"{address}data/plugin/scalars/tags", timeout=10).json()
    assert "loss" in tags[run], tags
    [profile] = list((logdir / run / "plugins" / "profile").glob("*/*.xplane.pb"))
    key = f"{keys.tensorboard_prefix(job_id, 0)}/{profile.relative_to(logdir / run).as_posix()}"
    with open_store(settings=stack.settings).open_read(key) as handle:
        assert profile.read_bytes() == handle.read()


def _scalars(address: str, run: str, tag: str) -> list[Any] | None:
    """TensorBoard's points of `tag` in `run` ([wall time, step, value] each), if any."""
    try:
        response = httpx.get(
            f"{address}data/plugin/scalars/scalars", params={"run": run, "tag": tag}, timeout=10
        )
    except httpx.HTTPError:
        return None
    return response.json() if response.status_code == 200 else None
