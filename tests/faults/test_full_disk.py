"""DATA_DIR full: the stack's DATA_DIR is a small tmpfs of the test's own, filled to the
last byte while a job trains and checkpoints. The replica exits saying the disk is full,
the agent keeps running and reports it, the job restarts under its policy; once space is
freed it resumes from the last whole checkpoint, never from the one being written."""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services.exit_codes import NO_SPACE, NO_SPACE_REASON
from tests.e2e.conftest import job_story, wait_for, wait_terminal
from tests.faults.conftest import event_time, record, steps_redone, steps_seen
from tests.faults.nothing_lost import assert_nothing_lost
from tests.tmpfs import fill, small_tmpfs
from workers import layout
from workers.node.checkpoint_names import checkpoint_files, named_checkpoints

pytestmark = pytest.mark.e2e

EVERY = 25  # steps between two checkpoints
STEPS = 8 * 100
JOB: dict[str, Any] = {
    "name": "full-disk",
    "replicas": 1,
    "restart_policy": "on_failure",
    "max_restarts": 2,
    "hyperparameters": {
        "epochs": 8,
        "steps_per_epoch": 100,
        "hidden_units": 256,
        "checkpoint_every_steps": EVERY,
    },
}


@pytest.fixture
def data_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB tmpfs for DATA_DIR. Requested before make_stack, so it is unmounted only
    after the stack has stopped."""
    with small_tmpfs(tmp_path / "data", 64 * 2**20) as path:
        yield path


def local_checkpoint(data_dir: Path, job_id: int) -> int | None:
    """The checkpoint (ckpt-<n>) the node's state file names, if every file of it is
    there; None without one."""
    chief = layout.checkpoint_dir(data_dir, job_id) / "chief"
    try:
        state = (chief / "checkpoint").read_bytes()
        present = {p.name for p in chief.iterdir()}
        # Saved meanwhile (a new state file, then the old checkpoint's files deleted):
        # this listing is of another moment than the state read before it. Look again.
        if (chief / "checkpoint").read_bytes() != state:
            return None
    except OSError:
        return None
    names = named_checkpoints(state)
    if not names:
        return None
    assert checkpoint_files("", names[0], present) is not None, (
        f"the state file names {names[0]}, which is not whole: {sorted(present)}"
    )
    match = re.fullmatch(r"ckpt-(\d+)", names[0])
    return int(match.group(1)) if match else None


def restarts(client: Any, job_id: int) -> list[dict[str, Any]]:
    return [e for e in client.events(job_id) if e["to_status"] == "restarting"]


def heartbeat_since(client: Any, since: float) -> bool:
    """Whether node-a is ready with a heartbeat sent after `since`."""
    node = next(n for n in client.nodes() if n["id"] == "node-a")
    beat = dt.datetime.fromisoformat(node["last_heartbeat"]).timestamp()
    return node["status"] == "ready" and beat > since


def test_a_full_data_dir_fails_the_replica_with_its_reason_and_the_job_recovers(
    data_disk: Path, make_stack: Any, tmp_path: Path
) -> None:
    # Attempt 3 waits 4 x 2 s after attempt 2 fails (the backoff doubles): time for the
    # test to see that failure and free the disk first, however loaded the machine.
    stack, client = make_stack(
        slots=1,
        COHORT_DATA_DIR=str(data_disk),
        COHORT_ARTIFACT_URL=str(tmp_path / "artifacts"),
        COHORT_RESTART_BACKOFF="4",
    )
    agent = stack.child("agent")
    job = client.submit(JOB)
    job_id = job["id"]
    # Training, with a checkpoint written and some steps beyond it.
    wait_for(
        lambda: (local_checkpoint(data_disk, job_id) or 0) >= 2, 180, "the job's second checkpoint"
    )
    written = local_checkpoint(data_disk, job_id)
    assert written is not None
    filler = fill(data_disk)
    filled_at = time.time()

    # The replica's next checkpoint cannot be written: it exits, saying why.
    first = wait_for(lambda: restarts(client, job_id), 60, "the job restarting")[0]
    detected = first["created_at"]
    assert NO_SPACE_REASON in first["reason"], first["reason"]
    assert f"code {NO_SPACE}" in first["reason"], first["reason"]

    # The agent, whose own log is on that disk too, runs on, heartbeats and stays ready.
    assert agent.poll() is None, "the agent died on the full disk"
    now = time.time()
    wait_for(lambda: heartbeat_since(client, now), 10, "a heartbeat of node-a")

    # Attempt 2 on the still full disk fails the same way, and the restart policy holds.
    second = wait_for(
        lambda: len(r := restarts(client, job_id)) >= 2 and r[1],
        120,
        "the second attempt failing too",
    )
    assert NO_SPACE_REASON in second["reason"], second["reason"]
    assert agent.poll() is None

    # What the node holds is the last whole checkpoint; the one being written when the
    # disk filled left nothing a restore would take.
    kept = local_checkpoint(data_disk, job_id)
    assert kept is not None and kept >= written, (kept, written)
    filler.unlink()
    freed_at = time.time()

    final = wait_terminal(client, job_id, timeout=240)
    third_placed = event_time(client, job_id, "scheduled", attempt=3)
    assert third_placed is not None and third_placed > freed_at, job_story(client, job_id)
    assert final["status"] == "succeeded", job_story(client, job_id)
    assert final["attempt"] == 3, job_story(client, job_id)
    assert agent.poll() is None

    # Attempt 3 began right after that checkpoint, and trained to the end.
    third = steps_seen(client, job_id, 3)
    assert min(third) - 1 == kept * EVERY, (min(third), kept)
    assert max(third) == STEPS
    seen = steps_seen(client, job_id, 1)
    first_step_3 = min(
        p["ts"]
        for p in client.metrics(job_id, attempt=3, name=["loss"], replica=0)
        if p["step"] == min(third)
    )
    # What each attempt wrote before the disk filled, and after it was freed, is stored
    # as written: a line torn by the full disk is no point, and no line of the log.
    assert_nothing_lost(stack, job_id)
    detect_s = dt.datetime.fromisoformat(detected).timestamp() - filled_at
    record(
        "DATA_DIR full (a tmpfs filled to the last byte mid-job)",
        f"replica exited {NO_SPACE} ({NO_SPACE_REASON}), the agent ran on and stayed "
        "ready; restarted per on_failure (the next attempt failed the same way on the "
        "full disk); once space was freed, resumed from the last whole checkpoint",
        detect_s,
        first_step_3 - freed_at,
        steps_redone(max(seen), kept * EVERY, "the last whole checkpoint"),
    )
