"""A replica killed or frozen mid-training: the gang is torn down and resumes from a checkpoint."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.e2e.conftest import wait_for, wait_terminal
from tests.faults.conftest import LONG_JOB, alive, event_time, record, steps_seen

pytestmark = pytest.mark.e2e


def running_job(client, spec, min_step: int) -> dict:  # type: ignore[no-untyped-def]
    job = client.submit(spec)
    wait_for(lambda: max(steps_seen(client, job["id"], 1) or [0]) >= min_step, 120,
             f"job {job['id']} to pass step {min_step}", interval=0.1)
    return client.job(job["id"])


def test_kill_9_replica_resumes_from_checkpoint(make_stack) -> None:  # type: ignore[no-untyped-def]
    _, client = make_stack()
    job = running_job(client, LONG_JOB, min_step=250)  # epochs 0 and 1 are checkpointed
    victim = job["replica_list"][1]["pid"]
    killed_at = time.time()
    os.kill(victim, signal.SIGKILL)

    final = wait_terminal(client, job["id"])
    events = client.events(job["id"])
    assert final["status"] == "succeeded", final["reason"]
    assert final["attempt"] == 2, [(e["to_status"], e["reason"]) for e in events]
    restarted = event_time(client, job["id"], "restarting")
    assert restarted is not None
    reason = next(e["reason"] for e in events if e["to_status"] == "restarting")
    assert "exited with code" in reason
    second = steps_seen(client, job["id"], 2)
    # BackupAndRestore: attempt 2 starts after the last finished epoch, not at step 1.
    assert min(second) > 100, min(second)
    assert max(second) == 600
    first_step_2 = min(p["ts"] for p in client.metrics(job["id"], attempt=2, name=["loss"],
                                                       replica=0) if p["step"] == min(second))
    assert not any(alive(r["pid"]) for r in final["replica_list"])
    redone = max(steps_seen(client, job["id"], 1)) - (min(second) - 1)
    record("replica killed (SIGKILL) mid-epoch", "gang torn down, restarted, resumed from the "
           f"checkpoint at step {min(second) - 1}", restarted - killed_at,
           first_step_2 - killed_at, f"{redone} steps redone (since the last epoch end)")


def test_frozen_replica_is_detected_and_restarted(make_stack) -> None:  # type: ignore[no-untyped-def]
    _, client = make_stack()
    job = running_job(client, LONG_JOB, min_step=150)
    victim = job["replica_list"][1]["pid"]
    frozen_at = time.time()
    os.kill(victim, signal.SIGSTOP)
    try:
        final = wait_terminal(client, job["id"])
    finally:
        if alive(victim):
            os.kill(victim, signal.SIGKILL)
    assert final["status"] == "succeeded", final["reason"]
    assert final["attempt"] == 2, [(e["to_status"], e["reason"]) for e in client.events(job["id"])]
    restarted = event_time(client, job["id"], "restarting")
    assert restarted is not None
    reason = next(e["reason"] for e in client.events(job["id"])
                  if e["to_status"] == "restarting")
    # Cohort's progress watchdog (8 s here) or TensorFlow's own peer check fails the gang.
    assert "hung: no progress" in reason or "exited with code" in reason, reason
    detect = restarted - frozen_at
    assert detect < 8 + 5, detect
    assert not alive(victim)
    second = steps_seen(client, job["id"], 2)
    assert min(second) > 100  # resumed from a checkpoint, not from step 1
    first_step_2 = min(p["ts"] for p in client.metrics(job["id"], attempt=2, name=["loss"],
                                                       replica=0) if p["step"] == min(second))
    redone = max(steps_seen(client, job["id"], 1)) - (min(second) - 1)
    record("replica frozen (SIGSTOP)", "no progress heartbeat for 8 s: gang torn down "
           "(SIGKILL for the frozen one), restarted from checkpoint", detect,
           first_step_2 - frozen_at, f"{redone} steps redone (since the last epoch end)")
