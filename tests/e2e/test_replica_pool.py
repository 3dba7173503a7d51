"""End to end with warm replica processes: a stack whose agent keeps two
(COHORT_REPLICA_POOL_SIZE=2 in its environment, as an operator sets it) runs a 2-replica
MultiWorkerMirroredStrategy job on them exactly as on cold processes, stops them on
cancel, and restarts the gang per its policy when one is killed with SIGKILL."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from cli.stack import Stack
from cohort.client import Client
from tests.conftest import reachable_dir
from tests.e2e.conftest import pg_stack_with, wait_for, wait_terminal
from tests.e2e.test_two_replica_job import JOB, check_two_replica_job
from tests.faults.nothing_lost import assert_nothing_lost

pytestmark = [pytest.mark.e2e, pytest.mark.slow(70)]

POOLED = {
    "COHORT_REPLICA_POOL_SIZE": "2",
    "COHORT_HEARTBEAT_INTERVAL": "1",
    "COHORT_RESTART_BACKOFF": "1",
    "COHORT_STOP_GRACE": "5",
    "COHORT_SCHEDULER_INTERVAL": "0.5",
}


@pytest.fixture(scope="module")
def pooled_stack(replicas_tmp_root: Path) -> Iterator[tuple[Stack, Client]]:
    """One stack for the module's tests: two warm processes are started once."""
    with pg_stack_with(reachable_dir(replicas_tmp_root, "pool-e2e-"), POOLED) as stack:
        yield stack


def warm_ready(stack: Stack) -> set[int]:
    """The agent's two warm processes, once both say they are ready (in the pool's log)."""
    agent = psutil.Process(stack.child("agent").pid)
    warm_log = stack.settings.data_dir / "pool" / "warm.log"

    def ready() -> set[int] | None:
        said = set(
            map(
                int,
                re.findall(
                    r"cohort: warm process (\d+) ready",
                    warm_log.read_text() if warm_log.exists() else "",
                ),
            )
        )
        waiting = {
            child.pid
            for child in agent.children(recursive=False)
            if "workers.replica.pool_entry" in " ".join(child.cmdline())
            and child.status() != psutil.STATUS_ZOMBIE
        }
        return waiting if len(waiting) == 2 and waiting <= said else None

    return wait_for(ready, 600, "two warm replica processes")  # type: ignore[no-any-return]


def replica_log(stack: Stack, job_id: int, attempt: int, index: int) -> str:
    return (
        stack.settings.data_dir
        / "jobs"
        / str(job_id)
        / "logs"
        / f"attempt-{attempt}"
        / f"replica-{index}.log"
    ).read_text()


def assert_pooled(stack: Stack, job: dict[str, Any], warm: set[int]) -> None:
    """Every replica of `job` ran in one of the warm processes `warm`, which says so."""
    for replica in job["replica_list"]:
        assert replica["pid"] in warm, (replica["pid"], warm)
        log = replica_log(stack, job["id"], job["attempt"], replica["index"])
        assert f"cohort: warm replica: process {replica['pid']} was ready" in log


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_two_replica_job_on_warm_processes(pooled_stack: tuple[Stack, Client]) -> None:
    stack, client = pooled_stack
    warm = warm_ready(stack)
    check_two_replica_job(stack, client)  # everything a cold run is checked for
    job = client.submit(JOB, idempotency_key="e2e-1")  # the same job, by its key
    assert_pooled(stack, client.job(job["id"]), warm)


def test_cancel_stops_pooled_replicas(pooled_stack: tuple[Stack, Client]) -> None:
    stack, client = pooled_stack
    warm = warm_ready(stack)
    job = client.submit(
        {**JOB, "name": "long-pooled", "hyperparameters": {"epochs": 200, "steps_per_epoch": 50}}
    )
    running = wait_for(
        lambda: (j := client.job(job["id"]))["status"] == "running" and j, 60, "the job to run"
    )
    assert_pooled(stack, running, warm)
    pids = [r["pid"] for r in running["replica_list"]]
    if os.geteuid() == 0:  # an agent as root: each pooled replica runs as the job's uid
        uid = stack.settings.REPLICA_UID_BASE + job["id"] % stack.settings.REPLICA_UID_RANGE
        assert {psutil.Process(p).uids().real for p in pids} == {uid}
    client.cancel(job["id"])
    wait_for(lambda: not any(alive(p) for p in pids), 15, "replicas to exit")
    final = wait_for(
        lambda: (
            (j := client.job(job["id"]))
            and all(r["status"] == "stopped" for r in j["replica_list"])
            and j
        ),
        15,
        "replicas stopped",
    )
    assert final["status"] == "cancelled"


def test_kill_9_of_a_pooled_replica_restarts_the_gang(
    pooled_stack: tuple[Stack, Client],
) -> None:
    stack, client = pooled_stack
    warm = warm_ready(stack)
    job = client.submit(
        {
            **JOB,
            "name": "killed-pooled",
            "restart_policy": "on_failure",
            "max_restarts": 2,
            "hyperparameters": {"epochs": 4, "steps_per_epoch": 50},
        }
    )

    def past_step_60() -> dict[str, Any] | None:
        points = client.metrics(job["id"], name=["loss"], replica=0, attempt=1)
        return client.job(job["id"]) if max((p["step"] for p in points), default=0) > 60 else None

    running = wait_for(past_step_60, 120, "the first epoch to be checkpointed")
    assert_pooled(stack, running, warm)
    victim = running["replica_list"][1]["pid"]
    os.kill(victim, signal.SIGKILL)
    final = wait_terminal(client, job["id"])
    assert final["status"] == "succeeded", final["reason"]
    assert final["attempt"] == 2
    reason = next(e["reason"] for e in client.events(job["id"]) if e["to_status"] == "restarting")
    assert "exited with code 137" in reason, reason
    assert not any(alive(r["pid"]) for r in final["replica_list"])
    # Attempt 2 ran wherever it could (a warm process if ready, else cold), from the
    # checkpoint: its first step comes after epoch 1.
    second = [p["step"] for p in client.metrics(job["id"], name=["loss"], replica=0, attempt=2)]
    assert min(second) > 50 and max(second) == 200
    assert_nothing_lost(stack, job["id"])  # a pooled replica writes where a cold one does
