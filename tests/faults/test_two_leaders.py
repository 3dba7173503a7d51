"""Two schedulers that both believe they lead: the leader is frozen (SIGSTOP) past its
lock's expiry, the standby takes over and places the jobs submitted meanwhile, then the
first is resumed. Its fencing token is older, so SQL refuses its next transaction: it
writes nothing, sends nothing and steps down (services/cluster/fencing.py)."""

from __future__ import annotations

import os
import re
import signal
import time
from collections import Counter
from typing import Any

import psutil
import pytest
import sqlalchemy as sa

from cli.stack import Stack
from tests.e2e.conftest import free_port, wait_for, wait_terminal
from tests.e2e.stepper import stepping_job
from tests.faults.conftest import GANG, record
from tests.faults.lost_messages import log_of, started_events
from tests.faults.nothing_lost import assert_nothing_lost

pytestmark = [pytest.mark.e2e, pytest.mark.slow(30)]

LOCK_TTL = 3.0  # seconds: the frozen leader's lock lapses quickly
# Steppers (tests/e2e/stepper.py) for 5 s: what is tested is who places them.
JOB: dict[str, Any] = stepping_job(100, 0.05, name="fenced", **GANG)
LEADS = re.compile(r"scheduler is the leader \(fencing token (\d+)\)")


def tokens_led(stack: Stack, name: str) -> list[int]:
    """The fencing token of each term `name` led, in order."""
    return [int(token) for token in LEADS.findall(log_of(stack, name))]


def in_transaction(stack: Stack, pid: int) -> bool:
    """Whether any of process `pid`'s PostgreSQL sessions is inside a transaction."""
    ports = [
        c.laddr.port
        for c in psutil.Process(pid).net_connections("tcp")
        if c.raddr and c.raddr.port == 5432
    ]
    engine = sa.create_engine(stack.settings.database_url)
    try:
        with engine.connect() as connection:
            return bool(
                connection.execute(
                    sa.text(
                        "SELECT count(*) FROM pg_stat_activity WHERE client_port = ANY(:ports) "
                        "AND state <> 'idle'"
                    ),
                    {"ports": ports},
                ).scalar_one()
            )
    finally:
        engine.dispose()


def freeze_between_transactions(stack: Stack, pid: int) -> None:
    """SIGSTOP `pid` at a moment it holds no transaction open, so what it does first on
    resuming is a new transaction under its old token (a leader frozen inside one has it
    ended by PostgreSQL: tests/services/test_fencing.py)."""
    for _ in range(50):
        os.kill(pid, signal.SIGSTOP)
        if not in_transaction(stack, pid):
            return
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.05)
    raise AssertionError("the leader was inside a transaction at every try")


def test_a_resumed_leader_is_fenced_off_and_steps_down(make_stack) -> None:  # type: ignore[no-untyped-def]
    # A node id of its own: an agent reaps what its replicas' uid (one per job id) left
    # running on its node, and another stack on this machine may number its jobs alike.
    stack, client = make_stack(
        slots=4, COHORT_SCHEDULER_LOCK_TTL=str(LOCK_TTL), COHORT_NODE_ID=f"fence-{free_port()}"
    )
    first = wait_for(lambda: tokens_led(stack, "scheduler"), 60, "the first scheduler to lead")
    stack.add_scheduler("scheduler-b")
    leader = stack.child("scheduler").pid

    freeze_between_transactions(stack, leader)
    frozen_at = time.time()
    try:
        second = wait_for(lambda: tokens_led(stack, "scheduler-b"), 60, "the standby to lead")
        took_over = time.time() - frozen_at
        assert second[0] > first[0]
        jobs = [client.submit(JOB)["id"] for _ in range(3)]  # 6 replicas on 4 slots
        wait_for(
            lambda: client.job(jobs[0])["status"] != "queued", 60, "the new leader to place a job"
        )
    finally:
        os.kill(leader, signal.SIGCONT)
    resumed_at = time.time()

    # The resumed scheduler's first write is refused: it steps down, saying why.
    wait_for(
        lambda: "stepping down: a newer leader holds fencing token" in log_of(stack, "scheduler"),
        60,
        "the resumed leader to step down",
    )
    stepped_at = time.time()
    finals = [wait_terminal(client, job_id, timeout=300) for job_id in jobs]
    assert [f["status"] for f in finals] == ["succeeded"] * 3, [f["reason"] for f in finals]

    for job_id, final in zip(jobs, finals, strict=True):
        events = client.events(job_id)
        transitions = Counter((e["to_status"], e["attempt"]) for e in events)
        # No transition applied twice; each attempt placed once.
        assert max(transitions.values()) == 1, events
        assert {a for (s, a) in transitions if s == "scheduled"} == set(
            range(1, final["attempt"] + 1)
        ), events
        # Each replica of each attempt started once, and recorded once.
        started = started_events(stack, job_id)
        assert sorted(started) == sorted(set(started)), started
        assert len(started) == JOB["replicas"] * final["attempt"], started
        indices = [r["index"] for r in final["replica_list"]]
        assert sorted(indices) == list(range(JOB["replicas"])), final["replica_list"]
        assert_nothing_lost(stack, job_id)

    frozen_log = log_of(stack, "scheduler")
    assert "placed jobs" not in frozen_log  # every job was placed by the new leader
    assert tokens_led(stack, "scheduler") == first  # and it did not lead again
    assert "placed jobs" in log_of(stack, "scheduler-b")
    record(
        "two schedulers: the leader frozen (SIGSTOP) past its lock, resumed while the other leads",
        "the standby takes the lock and a newer fencing token; the "
        "resumed one's first transaction is refused, it sends nothing and steps down",
        took_over,
        stepped_at - resumed_at,
        "nothing: each job placed once, no transition applied twice",
    )
