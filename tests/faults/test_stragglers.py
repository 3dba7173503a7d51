"""A replica slowed by a real CPU limit is named a straggler; a node whose replicas keep
being killed (SIGKILL from outside, as the OOM killer or a failing host deal it) is
quarantined, offered nothing, and takes replicas again once its cordon is lifted.

The slowdown is the kernel scheduler's own: replica 1 of a 2-replica
MultiWorkerMirroredStrategy gang is pinned (sched_setaffinity, as `taskset` does) to a CPU
that spinning processes keep busy, replica 0 to the other CPU. Linux shares a CPU between
sessions (autogroups) before processes, and each replica is a session of its own
(workers/node/launcher.py), so each spinner is one too, and replica 1's session gets a
lower weight (its autogroup's nice, as a cgroup's cpu.weight would): whatever else runs on
a busy test machine, replica 1 gets a few times less of its CPU than replica 0 of its own.
Both still step at the same wall pace (each waits for the other at the all-reduce); only
replica 1's busy time per step grows.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from cohort.client import Client
from tests.e2e.conftest import job_story, wait_for, wait_terminal
from tests.e2e.stepper import stepping_job
from tests.faults.conftest import ARTIFACTS, GANG
from tests.faults.nothing_lost import assert_nothing_lost

pytestmark = [pytest.mark.e2e, pytest.mark.slow(120)]

METRICS_TOKEN = "fault-metrics-token-for-tests-only"
SPINNERS = 2  # sessions sharing replica 1's CPU with it
SLOW_NICE = 5  # replica 1's session's nice: a weight of 335 against the spinners' 1024 each
SLOW_JOB: dict[str, Any] = {
    "name": "slowed",
    **GANG,
    "hyperparameters": {"epochs": 50, "steps_per_epoch": 100},
}


@contextmanager
def spinning(cpu: int, count: int) -> Iterator[None]:
    """`count` processes that keep CPU `cpu` busy, ended on leaving."""
    spinners = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"import os; os.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass",
            ],
            start_new_session=True,  # a session, hence a share of the CPU, of its own
        )
        for _ in range(count)
    ]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def pin(pid: int, cpu: int) -> None:
    """Every thread of process `pid` on CPU `cpu` (threads it makes later inherit it)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), {cpu})
        except ProcessLookupError:  # the thread ended meanwhile
            continue


def lower_weight(pid: int, nice: int) -> None:
    """Give process `pid`'s session (its autogroup) this nice: its share of a CPU shared
    with other sessions shrinks (proc(5), /proc/PID/autogroup)."""
    Path(f"/proc/{pid}/autogroup").write_text(f"{nice}\n")


def busy_reports(client: Client, job_id: int, replica: int) -> int:
    return len(client.metrics(job_id, name=["busy_step_time"], replica=replica, limit=10_000))


def figures(client: Client, job_id: int) -> str:
    """Each replica's newest busy times per step (ms) and wall step time, for a failure."""
    lines = []
    for replica in (0, 1):
        for name in ("busy_step_time", "step_time"):
            points = client.metrics(job_id, name=[name], replica=replica, limit=100_000)
            newest = [f"{p['step']}:{p['value'] * 1000:.1f}" for p in points[-12:]]
            lines.append(f"replica {replica} {name}: {' '.join(newest)}")
    return "\n".join(lines)


def straggler_events(client: Client, job_id: int) -> list[dict[str, Any]]:
    return [e for e in client.events(job_id) if "straggler" in e["reason"]]


def scrape(url: str) -> str:
    answer = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    answer.raise_for_status()
    return answer.text


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to slow one replica")
def test_a_replica_on_a_busy_cpu_is_named_a_straggler(make_stack) -> None:  # type: ignore[no-untyped-def]
    stack, client = make_stack(COHORT_METRICS_TOKEN=METRICS_TOKEN)
    fast_cpu, slow_cpu = sorted(os.sched_getaffinity(0))[:2]
    job = client.submit(SLOW_JOB)
    # Both replicas report their busy time, steady, before the slowdown.
    wait_for(
        lambda: min(busy_reports(client, job["id"], r) for r in (0, 1)) >= 3,
        180,
        "both replicas' busy time per step",
        explain=lambda: job_story(client, job["id"]),
    )
    running = client.job(job["id"])
    pin(running["replica_list"][0]["pid"], fast_cpu)
    assert not straggler_events(client, job["id"]), straggler_events(client, job["id"])
    with spinning(slow_cpu, SPINNERS):
        pin(running["replica_list"][1]["pid"], slow_cpu)
        lower_weight(running["replica_list"][1]["pid"], SLOW_NICE)
        slowed_at = time.time()
        [event] = wait_for(
            lambda: straggler_events(client, job["id"]),
            120,
            "replica 1 named a straggler",
            interval=0.25,
            explain=lambda: job_story(client, job["id"]) + "\n" + figures(client, job["id"]),
        )
    named_at = dt.datetime.fromisoformat(event["created_at"]).timestamp()
    assert event["reason"].startswith("replica 1 on node node-a is a straggler: busy "), event
    assert event["attempt"] == 1 and event["to_status"] == "running", event
    assert 'cohort_stragglers_total{node="node-a"} 1.0' in scrape(stack.url)
    client.cancel(job["id"])
    assert wait_terminal(client, job["id"])["status"] == "cancelled", job_story(client, job["id"])
    assert_nothing_lost(stack, job["id"])
    detect_s = named_at - slowed_at
    # Written after the assertions it reports (docs/benchmarks.md).
    ARTIFACTS.mkdir(exist_ok=True)
    with open(ARTIFACTS / "stragglers.jsonl", "a") as handle:
        handle.write(
            json.dumps(
                {
                    "figure": "straggler detection time",
                    "detect_s": round(detect_s, 2),
                    "reason": event["reason"],
                    "at": time.strftime("%Y-%m-%d %H:%M:%S"),
                    "load": round(os.getloadavg()[0], 1),
                }
            )
            + "\n"
        )


def node_a(client: Client) -> dict[str, Any]:
    [node] = [n for n in client.nodes() if n["id"] == "node-a"]
    return node


def test_a_node_whose_replicas_are_killed_is_quarantined_until_lifted(make_stack) -> None:  # type: ignore[no-untyped-def]
    # The stack's one node may be quarantined (by default half the live nodes may: none of one).
    stack, client = make_stack(slots=1, COHORT_QUARANTINE_MAX_SHARE="1")
    faults = stack.settings.QUARANTINE_FAILURES
    for n in range(faults):
        job = client.submit(
            stepping_job(10_000, 0.01, name=f"killed-{n}", replicas=1, restart_policy="never")
        )
        pid = wait_for(
            lambda job=job: [r["pid"] for r in client.job(job["id"])["replica_list"] if r["pid"]],
            60,
            f"job {job['id']}'s replica to start",
            explain=lambda job=job: job_story(client, job["id"]),
        )
        assert node_a(client)["cordon"] is None, node_a(client)
        os.kill(pid[0], signal.SIGKILL)
        final = wait_terminal(client, job["id"])
        assert final["status"] == "failed", job_story(client, job["id"])
        assert_nothing_lost(stack, job["id"])
    wait_for(lambda: node_a(client)["cordon"] == "quarantine", 30, "node-a quarantined")
    reason = node_a(client)["cordon_reason"]
    assert reason.startswith(f"quarantined: {faults} replicas failed or straggled here"), reason
    assert "killed by signal 9" in reason, reason
    waiting = client.submit(stepping_job(20, 0.01, name="after", replicas=1))
    time.sleep(5 * stack.settings.SCHEDULER_INTERVAL + 2)  # passes that could have placed it
    assert client.job(waiting["id"])["status"] == "queued", job_story(client, waiting["id"])
    assert client.undrain_node("node-a")["cordon"] is None
    final = wait_terminal(client, waiting["id"])
    assert final["status"] == "succeeded", job_story(client, waiting["id"])
    assert node_a(client)["cordon"] is None  # the faults before the lift no longer count
    assert_nothing_lost(stack, waiting["id"])
