"""Two nodes that share nothing but the artifact store (each agent has its own DATA_DIR):
the node running a job dies after the job's first checkpoint reached the store, the gang
restarts on the other node, restores that checkpoint and resumes from it."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import job_story, wait_for, wait_terminal
from tests.faults.conftest import (
    record,
    running_replica,
    saved_checkpoint,
    steps_redone,
    steps_seen,
    stored_checkpoint,
)
from tests.faults.nothing_lost import agent_data_dirs, assert_nothing_lost
from tests.faults.processes import attempt_processes
from workers import layout

pytestmark = pytest.mark.e2e

EVERY = 25  # steps between two checkpoints
EPOCHS = 4
RESUMABLE_JOB: dict[str, Any] = {
    "name": "resumable",
    "replicas": 1,
    "restart_policy": "on_failure",
    "max_restarts": 2,
    "hyperparameters": {
        "epochs": EPOCHS,
        "steps_per_epoch": 100,
        "hidden_units": 256,
        "checkpoint_every_steps": EVERY,
    },
}


def test_a_gang_restarted_on_another_node_resumes_from_the_stored_checkpoint(
    make_stack, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    artifacts = tmp_path / "shared-artifacts"  # neither node's DATA_DIR
    stack, client = make_stack(slots=1, COHORT_ARTIFACT_URL=str(artifacts))
    stack.add_agent("node-b", 1, data_dir=str(tmp_path / "data-node-b"))
    wait_for(
        lambda: len([n for n in client.nodes() if n["status"] == "ready"]) == 2,
        60,
        "two ready nodes",
    )
    job = client.submit(RESUMABLE_JOB)
    replica = running_replica(client, job["id"], timeout=120)
    node, pid = replica["node_id"], replica["pid"]
    local = layout.checkpoint_dir(agent_data_dirs(stack)[node], job["id"]) / "chief"
    # The replica is held still (SIGSTOP) once its first checkpoint is on its node's disk:
    # 400 quick steps end in about a second and a half on a quiet machine, and the agent
    # mirrors its checkpoint directory once a second, so a job left running could end (and
    # its BackupAndRestore delete the directory, the mirror with it) between two syncs, and
    # the store never hold a checkpoint. Frozen, the checkpoint stays; the agent, which
    # runs on, mirrors it, and its death then ends the replica (its watcher, a process of
    # its own, SIGKILLs the group, workers/replica/parent_watch.py).
    wait_for(lambda: saved_checkpoint(local), 120, "the first checkpoint on disk", interval=0.02)
    os.kill(pid, signal.SIGSTOP)
    try:
        number = wait_for(
            lambda: stored_checkpoint(artifacts, job["id"]),
            60,
            "the job's first checkpoint in the store",
            explain=lambda: job_story(client, job["id"]),
        )
        killed_at = time.time()
        stack.kill("agent" if node == "node-a" else "agent-node-b")
        # Nothing reaches the store from that node any more: the newest stored now is the
        # one the other node must restore.
        last = stored_checkpoint(artifacts, job["id"])
        assert last is not None and last >= number, (last, number)
        wait_for(
            lambda: not attempt_processes(stack, job["id"], 1),
            15,
            "the orphaned replica to stop",
            interval=0.25,
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)  # a failure above: the stack's stop ends it
    # How far attempt 1 got, by its last stored checkpoint: its metric points lag it (on
    # a busy machine, all of them were still on the killed node's way to SQL).
    assert last * EVERY < EPOCHS * 100, "the job finished before its node died"

    final = wait_terminal(client, job["id"], timeout=240)
    assert final["status"] == "succeeded", job_story(client, job["id"])
    assert final["attempt"] == 2, job_story(client, job["id"])
    other = "node-b" if node == "node-a" else "node-a"
    assert {r["node_id"] for r in final["replica_list"]} == {other}

    # Attempt 2 began right after the newest checkpoint in the store: the other node
    # restored it.
    second = steps_seen(client, job["id"], 2)
    last_seen = max(steps_seen(client, job["id"], 1), default=0)  # none, if all were lost
    resumed_after = min(second) - 1
    assert resumed_after == last * EVERY, (last, min(second), last_seen)
    assert max(second) == EPOCHS * 100
    assert_nothing_lost(stack, job["id"], agent_died_in=[1])

    # The job's results are in the store, whichever node made them.
    listed = {item["path"] for item in client.artifacts(job["id"])}
    assert "model/saved_model.pb" in listed, sorted(listed)
    assert "logs/attempt-2/replica-0.log" in listed, sorted(listed)
    first_step_2 = min(
        p["ts"]
        for p in client.metrics(job["id"], attempt=2, name=["loss"], replica=0)
        if p["step"] == min(second)
    )
    record(
        "node agent killed (SIGKILL), nodes share only the artifact store",
        "gang placed on the other node (its own DATA_DIR), which restored the newest "
        "checkpoint from the store before starting",
        None,
        first_step_2 - killed_at,
        steps_redone(last_seen, resumed_after, "the last stored checkpoint"),
    )
