"""A replica killed or hung mid-training: the gang is torn down and resumes from a checkpoint."""

from __future__ import annotations

import os
import signal
import time

import pytest

from cli.stack import Stack
from cohort.client import Client
from tests.e2e.conftest import job_story, wait_terminal
from tests.faults.conftest import (
    LONG_JOB,
    LONG_JOB_STEPS,
    POOL,
    chief_checkpoints,
    event_time,
    old_attempt_gone,
    past_first_checkpoint,
    pool_full,
    record,
    saved_checkpoint,
    steps_redone,
    steps_seen,
    warm_replicas,
)
from tests.faults.nothing_lost import assert_nothing_lost
from tests.faults.processes import attempt_processes, main_thread_stopped

pytestmark = [pytest.mark.e2e, pytest.mark.slow(110)]

STEPS_PER_EPOCH = LONG_JOB["hyperparameters"]["steps_per_epoch"]


def last_epoch_checkpoint(stack: Stack, job_id: int) -> int:
    """The step of the newest checkpoint on node-a: LONG_JOB backs up at each epoch end
    only, so its n-th is that of step n * steps_per_epoch. Read once the stopped attempt's
    processes are gone and before the next attempt's first epoch end."""
    saved = saved_checkpoint(chief_checkpoints(stack, job_id))
    assert saved is not None, "no checkpoint saved"
    return saved * STEPS_PER_EPOCH


def first_step_ts(client: Client, job_id: int, attempt: int) -> tuple[int, float]:
    """The first step attempt `attempt` stored, and when the chief made it."""
    points = client.metrics(job_id, attempt=attempt, name=["loss"], replica=0, limit=100_000)
    first = min(p["step"] for p in points)
    return first, min(p["ts"] for p in points if p["step"] == first)


@pytest.mark.parametrize("pool", [0, POOL], ids=["cold", "pooled"])
def test_kill_9_replica_resumes_from_checkpoint(make_stack, pool: int) -> None:  # type: ignore[no-untyped-def]
    stack, client = make_stack(COHORT_REPLICA_POOL_SIZE=str(pool))
    if pool:
        pool_full(stack)
    job = past_first_checkpoint(stack, client, LONG_JOB)  # early in epoch 1
    assert warm_replicas(client, job["id"], 1) == ({0, 1} if pool else set())
    victim = job["replica_list"][1]["pid"]
    killed_at = time.time()
    os.kill(victim, signal.SIGKILL)
    old_attempt_gone(stack, client, job["id"], 1)
    resumed_after = last_epoch_checkpoint(stack, job["id"])

    final = wait_terminal(client, job["id"])
    assert final["status"] == "succeeded", job_story(client, job["id"])
    assert final["attempt"] == 2, job_story(client, job["id"])
    restarted = event_time(client, job["id"], "restarting")
    assert restarted is not None
    reason = next(e["reason"] for e in client.events(job["id"]) if e["to_status"] == "restarting")
    assert "exited with code" in reason
    # BackupAndRestore: attempt 2 starts right after the last checkpoint attempt 1 saved.
    first_step, first_step_at = first_step_ts(client, job["id"], 2)
    assert first_step == resumed_after + 1, (first_step, resumed_after)
    assert max(steps_seen(client, job["id"], 2)) == LONG_JOB_STEPS
    assert not attempt_processes(stack, job["id"], 2)
    assert_nothing_lost(stack, job["id"])
    redone = steps_redone(
        max(steps_seen(client, job["id"], 1)), resumed_after, "the last epoch end"
    )
    record(
        "replica killed (SIGKILL) mid-epoch",
        f"gang torn down, restarted, resumed from the checkpoint at step {resumed_after}",
        restarted - killed_at,
        first_step_at - killed_at,
        redone,
        pooled=bool(pool),
    )


@pytest.mark.parametrize("pool", [0, POOL], ids=["cold", "pooled"])
def test_frozen_replica_is_detected_and_restarted(make_stack, pool: int) -> None:  # type: ignore[no-untyped-def]
    stack, client = make_stack(COHORT_REPLICA_POOL_SIZE=str(pool))
    if pool:
        pool_full(stack)
    timeout = stack.settings.PROGRESS_TIMEOUT
    job = past_first_checkpoint(stack, client, LONG_JOB)
    assert warm_replicas(client, job["id"], 1) == ({0, 1} if pool else set())
    victim = job["replica_list"][1]["pid"]
    # Its training thread held, the rest of the process running: TensorFlow's own peer
    # check never fires (the coordination service's heartbeats come from another thread
    # and go on; a collective waiting for a peer has no timeout), so only Cohort's
    # progress watchdog can see it. A SIGSTOP of the whole process would race the two:
    # the coordination service declares a silent peer dead ~10-15 s on, and on a busy
    # machine that sometimes came first, failing the gang with an exit code instead.
    with main_thread_stopped(victim):
        frozen_at = time.time()
        old_attempt_gone(stack, client, job["id"], 1)
        resumed_after = last_epoch_checkpoint(stack, job["id"])
    final = wait_terminal(client, job["id"])
    assert final["status"] == "succeeded", job_story(client, job["id"])
    assert final["attempt"] == 2, job_story(client, job["id"])
    restarted = event_time(client, job["id"], "restarting")
    assert restarted is not None
    reason = next(e["reason"] for e in client.events(job["id"]) if e["to_status"] == "restarting")
    assert f"hung: no progress for {timeout:.0f}s" in reason, reason
    detect = restarted - frozen_at
    # The watchdog's pass runs every 0.5 s; the rest is a busy machine's slack.
    assert detect < timeout + 5, detect
    first_step, first_step_at = first_step_ts(client, job["id"], 2)
    assert first_step == resumed_after + 1, (first_step, resumed_after)
    assert max(steps_seen(client, job["id"], 2)) == LONG_JOB_STEPS
    assert_nothing_lost(stack, job["id"])
    redone = steps_redone(
        max(steps_seen(client, job["id"], 1)), resumed_after, "the last epoch end"
    )
    record(
        "replica hung (its training thread stopped, the process alive)",
        f"no progress heartbeat for {timeout:.0f} s: gang torn down (the hung process "
        "killed after the stop grace), restarted from checkpoint",
        detect,
        first_step_at - frozen_at,
        redone,
        pooled=bool(pool),
    )
