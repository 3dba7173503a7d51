"""Drains: a node drained by an operator, or by its own agent on SIGTERM, moves its gangs
off it after they checkpointed (SIGUSR1, exit 75), and they resume elsewhere from that
checkpoint with no step trained twice; a program that ignores SIGUSR1 is stopped when
the grace runs out. Every job ends with the full check of what its replicas wrote.

Each agent has its own DATA_DIR and they share only the artifact store: the next attempt
resumes from the checkpoint the drained replicas' agents synced before their exits."""

from __future__ import annotations

import datetime as dt
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from cli.stack import Stack
from cohort.client import Client
from tests.e2e.conftest import job_story, wait_for, wait_terminal
from tests.faults.conftest import LONG_JOB, record, steps_redone, steps_seen
from tests.faults.nothing_lost import assert_nothing_lost
from tests.faults.saving_job import saving_job

pytestmark = [pytest.mark.e2e, pytest.mark.slow(60)]

STEPS, PAUSE = 400, 0.05  # 20 s of steps: a drain lands mid-job
# The trainer gang's run: 800 steps of the built-in MLP, about 12 s alone and three times
# that on a loaded machine, so that the drain lands mid-job there too.
TRAINER_HP = {"epochs": 8, "steps_per_epoch": 100}
TRAINER_STEPS = TRAINER_HP["epochs"] * TRAINER_HP["steps_per_epoch"]


def ready_nodes(client: Client, count: int) -> None:
    wait_for(
        lambda: len([n for n in client.nodes() if n["status"] == "ready"]) == count,
        60,
        f"{count} ready nodes",
    )


def running(client: Client, job_id: int, attempt: int, past_step: int) -> dict[str, Any]:
    """Wait until the job's `attempt` runs and its replica 0 has stored step `past_step`."""

    def there() -> dict[str, Any] | None:
        job = client.job(job_id)
        seen = steps_seen(client, job_id, attempt)
        ok = job["status"] == "running" and job["attempt"] == attempt
        return job if ok and seen and max(seen) >= past_step else None

    return wait_for(
        there,
        120,
        f"attempt {attempt} past step {past_step}",
        explain=lambda: job_story(client, job_id),
    )


def reasons(client: Client, job_id: int) -> list[str]:
    return [e["reason"] for e in client.events(job_id)]


def first_step_at(client: Client, job_id: int, attempt: int) -> float:
    points = client.metrics(job_id, attempt=attempt, name=["loss"], replica=0, limit=100_000)
    return min(points, key=lambda p: p["step"])["ts"]


def with_a_spare(stack: Stack, client: Client, tmp_path: Path) -> None:
    """node-a, node-b and a spare node-c, held back (drained) until `take_the_spare`: the
    gang goes on node-a and node-b, and the spare is there the moment node-a is drained.
    An agent started only then can take a loaded machine longer to bring up than the job
    has left to run (a CI run: the drain reached replicas that had just finished)."""
    stack.add_agent("node-b", 1, data_dir=str(tmp_path / "data-node-b"))
    stack.add_agent("node-c", 1, data_dir=str(tmp_path / "data-node-c"))
    ready_nodes(client, 3)
    client.drain_node("node-c", "a spare, held back")


def take_the_spare(client: Client) -> None:
    assert client.undrain_node("node-c")["cordon"] is None


def exits(client: Client, job_id: int, attempt: int) -> list[str]:
    """Each replica's own last words in the attempt (the saving job prints its answer)."""
    lines = client.logs(job_id, attempt=attempt, limit=100_000)
    return [line["line"] for line in lines if "checkpointed at step" in line["line"]]


def test_a_drained_node_s_gang_checkpoints_and_resumes_elsewhere(
    make_stack, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    artifacts = tmp_path / "shared-artifacts"
    stack, client = make_stack(slots=1, COHORT_ARTIFACT_URL=str(artifacts))
    with_a_spare(stack, client, tmp_path)
    # restart_policy never: a move is not a restart, so the job still moves.
    job = client.submit(saving_job(STEPS, PAUSE, name="drained", replicas=2))
    first = running(client, job["id"], 1, 20)
    assert {r["node_id"] for r in first["replica_list"]} == {"node-a", "node-b"}
    take_the_spare(client)

    drained_at = time.time()
    node = client.drain_node("node-a", "maintenance")
    assert node["cordon"] == "drain" and node["cordon_reason"].startswith("maintenance (by ")
    second = running(client, job["id"], 2, 1)
    assert {r["node_id"] for r in second["replica_list"]} == {"node-b", "node-c"}
    moved_at = first_step_at(client, job["id"], 2)
    listed = next(n for n in client.nodes() if n["id"] == "node-a")
    assert listed["cordon"] == "drain" and "maintenance" in listed["cordon_reason"]

    # While node-a is drained, a gang that needs it waits in the queue.
    wide = client.submit(saving_job(5, 0.01, name="wide", replicas=3))
    final = wait_terminal(client, job["id"], timeout=180)
    assert final["status"] == "succeeded", job_story(client, job["id"])
    assert final["attempt"] == 2, job_story(client, job["id"])
    # Both replicas answered SIGUSR1 by saving and exiting 75.
    assert len(exits(client, job["id"], 1)) == 2, exits(client, job["id"], 1)
    said = reasons(client, job["id"])
    assert any("node node-a drained: asked its 2 replicas to checkpoint now" in r for r in said)
    moved = next(r for r in said if r.startswith("drained from node node-a"))
    assert "all 2 replicas checkpointed (exit 75)" in moved, said
    assert "not counted as a restart" in moved
    # Attempt 2 resumed right after the step replica 0 saved: no step trained twice.
    before, after = steps_seen(client, job["id"], 1), steps_seen(client, job["id"], 2)
    assert min(after) == max(before) + 1, (max(before), min(after))
    assert max(after) == STEPS
    assert_nothing_lost(stack, job["id"])

    assert client.job(wide["id"])["status"] == "queued", job_story(client, wide["id"])
    assert client.undrain_node("node-a")["cordon"] is None
    assert wait_terminal(client, wide["id"], timeout=120)["status"] == "succeeded"
    assert_nothing_lost(stack, wide["id"])
    record(
        "node drained (cohort node drain) under a 2-replica gang",
        "both replicas sent SIGUSR1: saved and exited 75; the gang moved to two other "
        "nodes, resumed from the synced checkpoint (a move, not a restart)",
        None,
        moved_at - drained_at,
        steps_redone(max(before), min(after) - 1, "the drain's checkpoint"),
    )


def test_a_drained_trainer_gang_saves_at_one_step_and_resumes_after_it(
    make_stack, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The issue's figure: a 2-replica MWMS `trainer` job drained mid-epoch redoes at most
    one step. Cohort's callbacks answer SIGUSR1 together (workers/replica/backups.py: the
    workers agree on the step), save a step-level backup and exit 75; the next attempt
    restores it on other nodes. Its nodes sample per-step points, as nodes do by default
    (workers/step_records.py): the step before the drain's exit is shipped whatever the
    stride, so what was redone is still counted from the points."""
    artifacts = tmp_path / "shared-artifacts"
    stack, client = make_stack(
        slots=1, COHORT_ARTIFACT_URL=str(artifacts), COHORT_STEP_POINTS_PER_SECOND="10"
    )
    with_a_spare(stack, client, tmp_path)
    job = client.submit({**LONG_JOB, "name": "drained-trainer", "hyperparameters": TRAINER_HP})
    first = running(client, job["id"], 1, 30)
    assert {r["node_id"] for r in first["replica_list"]} == {"node-a", "node-b"}
    take_the_spare(client)

    drained_at = time.time()
    client.drain_node("node-a", "maintenance")
    second = running(client, job["id"], 2, 1)
    assert {r["node_id"] for r in second["replica_list"]} == {"node-b", "node-c"}
    moved_at = first_step_at(client, job["id"], 2)
    final = wait_terminal(client, job["id"], timeout=300)
    assert final["status"] == "succeeded", job_story(client, job["id"])
    assert final["attempt"] == 2, job_story(client, job["id"])
    said = reasons(client, job["id"])
    moved = next(r for r in said if r.startswith("drained from node node-a"))
    assert "all 2 replicas checkpointed (exit 75)" in moved, said
    before, after = steps_seen(client, job["id"], 1), steps_seen(client, job["id"], 2)
    saved_at = min(after) - 1  # the step the drain's backup holds
    assert max(before) - saved_at <= 1, (max(before), min(after))  # at most one step redone
    assert max(after) == TRAINER_STEPS, max(after)
    assert_nothing_lost(stack, job["id"])
    record(
        "node drained (cohort node drain) under a 2-replica MWMS trainer gang",
        "Cohort's callbacks answered SIGUSR1 together: both workers saved a step-level "
        "backup at one step and exited 75; the gang resumed on two other nodes after it",
        None,
        moved_at - drained_at,
        steps_redone(max(before), saved_at, "the drain's backup"),
    )


def test_a_program_that_ignores_sigusr1_is_stopped_when_the_grace_runs_out(
    make_stack, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    grace = 4
    stack, client = make_stack(slots=1, COHORT_DRAIN_GRACE=str(grace))
    stack.add_agent("node-b", 1, data_dir=str(tmp_path / "data-node-b"))
    ready_nodes(client, 2)
    job = client.submit(saving_job(300, PAUSE, ignore=True, name="deaf", replicas=1))
    first = running(client, job["id"], 1, 10)
    node = first["replica_list"][0]["node_id"]
    client.drain_node(node)
    running(client, job["id"], 2, 1)
    said = reasons(client, job["id"])
    moved = next(r for r in said if r.startswith(f"drained from node {node}"))
    assert f"0 of 1 replicas checkpointed; the grace of {grace}s ran out" in moved, said
    events = {e["to_status"]: e for e in client.events(job["id"]) if e["attempt"] == 1}
    asked = next(e for e in client.events(job["id"]) if "asked its 1 replicas" in e["reason"])
    waited = (
        dt.datetime.fromisoformat(events["restarting"]["created_at"])
        - dt.datetime.fromisoformat(asked["created_at"])
    ).total_seconds()
    assert grace <= waited < grace + 5, waited
    final = wait_terminal(client, job["id"], timeout=120)
    assert final["status"] == "succeeded", job_story(client, job["id"])
    other = "node-b" if node == "node-a" else "node-a"
    assert {r["node_id"] for r in final["replica_list"]} == {other}
    assert_nothing_lost(stack, job["id"])


def test_an_agent_sent_sigterm_drains_its_node_before_it_exits(make_stack, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    artifacts = tmp_path / "shared-artifacts"
    stack, client = make_stack(slots=1, COHORT_ARTIFACT_URL=str(artifacts))
    stack.add_agent("node-b", 1, data_dir=str(tmp_path / "data-node-b"))
    ready_nodes(client, 2)
    job = client.submit(saving_job(STEPS, PAUSE, name="preempted", replicas=1))
    first = running(client, job["id"], 1, 20)
    node = first["replica_list"][0]["node_id"]
    agent = stack.child("agent" if node == "node-a" else "agent-node-b")
    signalled_at = time.time()
    agent.send_signal(signal.SIGTERM)
    # It exits by itself once its replica has checkpointed and its exit is reported.
    code = agent.wait(timeout=60)
    exited_after = time.time() - signalled_at
    assert code == 0, code
    second = running(client, job["id"], 2, 1)
    other = "node-b" if node == "node-a" else "node-a"
    assert {r["node_id"] for r in second["replica_list"]} == {other}
    listed = next(n for n in client.nodes() if n["id"] == node)
    assert listed["cordon"] == "drain", listed
    assert "its agent is draining it: it received SIGTERM" in listed["cordon_reason"]
    final = wait_terminal(client, job["id"], timeout=120)
    assert final["status"] == "succeeded", job_story(client, job["id"])
    assert len(exits(client, job["id"], 1)) == 1
    moved = next(r for r in reasons(client, job["id"]) if r.startswith(f"drained from node {node}"))
    assert "its replica checkpointed (exit 75)" in moved
    before, after = steps_seen(client, job["id"], 1), steps_seen(client, job["id"], 2)
    assert min(after) == max(before) + 1, (max(before), min(after))
    assert_nothing_lost(stack, job["id"])
    record(
        "node agent sent SIGTERM (a host shutdown, a spot notice)",
        f"the agent drained its node: its replica saved and exited 75, the agent exited "
        f"{exited_after:.1f} s after the signal; the gang resumed on the other node",
        None,
        first_step_at(client, job["id"], 2) - signalled_at,
        steps_redone(max(before), min(after) - 1, "the drain's checkpoint"),
    )
