"""A pass whose placement inputs are those the leader's last idle pass left skips the
queue's read and the placer (services/cluster/placement_digest.py); a change to any of
those inputs makes the next pass place again. Against PostgreSQL."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.cluster import gangs, queue_placement
from services.cluster.nodes import Heartbeat
from services.cluster.placement_digest import PlacementMemo
from services.jobs import quotas
from services.jobs import store as jobs
from services.jobs.quota_schemas import QuotaUpdate
from services.jobs.transitions import transition_job
from services.models import Job, utcnow
from services.scheduling import scheduler_pass
from services.settings import get_settings
from services.statuses import JobStatus
from tests.factories import create_job, create_token

JOB: dict[str, Any] = {"strategy": "multi_worker_mirrored"}


class Leader:
    """Passes as the scheduler runs them: one memo, `committed()` after each pass."""

    def __init__(self, session: Session, node: str) -> None:
        self.session, self.node, self.slots = session, node, 2
        self.memo = PlacementMemo()
        self.placer_calls = 0

    def beat(self, node: str | None = None, slots: int | None = None) -> Heartbeat:
        at = utcnow()
        return Heartbeat(
            node_id=node or self.node,
            address="10.4.0.1",
            slots=slots or self.slots,
            gpus=0,
            at=at,
            after=at,
        )

    def run(self, *beats: Heartbeat) -> scheduler_pass.PassResult:
        result = scheduler_pass.run_pass(
            session=self.session,
            settings=get_settings(),
            heartbeats=list(beats) or [self.beat()],
            memo=self.memo,
        )
        self.memo.committed()
        return result


@pytest.fixture
def leader(session: Session, monkeypatch: pytest.MonkeyPatch) -> Leader:
    node = f"idle-{uuid.uuid4().hex[:6]}"
    leader = Leader(session, node)
    real = queue_placement.place

    def counted(*args: Any, **kwargs: Any) -> Any:
        leader.placer_calls += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(queue_placement, "place", counted)
    return leader


def full_cluster(session: Session, leader: Leader, **limits: int | None) -> tuple[int, Job, Job]:
    """A node of 2 slots held by a running 2-replica gang, and a 1-replica job waiting
    for it; two passes, the second idle. (project id, the running job, the waiting one)"""
    name = f"idle-{uuid.uuid4().hex[:8]}"
    _, token = create_token(session, name)
    if limits:
        quotas.set_quota(
            session=session,
            project_name=name,
            quota_in=QuotaUpdate(**limits),
            settings=get_settings(),
        )
    running = create_job(session, token.project_id, replicas=2, **JOB)
    leader.run()
    for replica in jobs.read_replicas(session=session, job=running):
        gangs.record_replica_started(
            session=session, job_id=running.id, attempt=1, index=replica.index, pid=1, at=utcnow()
        )
    gangs.settle_job(session=session, job=running)
    assert running.status is JobStatus.RUNNING
    waiting = create_job(session, token.project_id, replicas=1, **JOB)
    leader.run()
    assert waiting.status is JobStatus.QUEUED and waiting.reason
    calls = leader.placer_calls
    leader.run()  # the same inputs as the pass before left them: not placed again
    assert leader.placer_calls == calls
    assert leader.memo.idle is not None
    return token.project_id, running, waiting


def test_an_idle_pass_skips_the_placer_and_keeps_every_reason(
    session: Session, leader: Leader
) -> None:
    _, _, waiting = full_cluster(session, leader)
    reason = waiting.reason
    calls = leader.placer_calls
    for _ in range(3):
        result = leader.run()
        assert result.placed == [] and result.messages == []
    assert leader.placer_calls == calls
    session.expire_all()
    assert session.get(Job, waiting.id).reason == reason  # type: ignore[union-attr]


def _replica_exits(session: Session, leader: Leader, running: Job) -> list[Heartbeat]:
    gangs.record_replica_exited(
        session=session,
        job_id=running.id,
        attempt=1,
        index=1,
        exit_code=0,
        log_tail="",
        at=utcnow(),
    )
    return [leader.beat()]


def _node_grows(_session: Session, leader: Leader, _running: Job) -> list[Heartbeat]:
    return [leader.beat(slots=3)]


def _another_node(_session: Session, leader: Leader, _running: Job) -> list[Heartbeat]:
    return [leader.beat(), leader.beat(f"{leader.node}-2")]


def _job_cancelled(session: Session, leader: Leader, running: Job) -> list[Heartbeat]:
    transition_job(
        session=session, job_id=running.id, target=JobStatus.CANCELLED, reason="cancelled"
    )
    gangs.settle_job(session=session, job=running)
    for replica in jobs.read_replicas(session=session, job=running):
        gangs.record_replica_exited(
            session=session,
            job_id=running.id,
            attempt=1,
            index=replica.index,
            exit_code=143,
            log_tail="",
            at=utcnow(),
        )
    return [leader.beat()]


# Each change, and the heartbeats of the pass after it.
CHANGES: dict[str, Callable[[Session, Leader, Job], list[Heartbeat]]] = {
    "a replica of the running gang ended": _replica_exits,
    "the node offers more slots": _node_grows,
    "another node registered": _another_node,
    "the running job was cancelled": _job_cancelled,
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_freed_or_new_capacity_places_the_waiting_job(
    session: Session, leader: Leader, change: str
) -> None:
    _, running, waiting = full_cluster(session, leader)
    beats = CHANGES[change](session, leader, running)
    assert leader.run(*beats).placed == [waiting.id]


def test_a_new_submission_is_placed_or_given_its_reason(session: Session, leader: Leader) -> None:
    pid, _, _ = full_cluster(session, leader)
    calls = leader.placer_calls
    newer = create_job(session, pid, replicas=1, **JOB)
    leader.run()
    assert leader.placer_calls == calls + 1
    assert newer.status is JobStatus.QUEUED and newer.reason.startswith("needs 1 CPU slot")


def test_a_raised_quota_places_the_job_it_held_back(session: Session, leader: Leader) -> None:
    leader.slots = 3  # room for the waiting job: the quota alone holds it back
    pid, _, waiting = full_cluster(session, leader, max_running_replicas=2)
    assert "quota" in waiting.reason, waiting.reason
    name = session.execute(
        sa.text("SELECT name FROM projects WHERE id = :id"), {"id": pid}
    ).scalar_one()
    quotas.set_quota(
        session=session,
        project_name=name,
        quota_in=QuotaUpdate(max_running_replicas=3),
        settings=get_settings(),
    )
    assert leader.run().placed == [waiting.id]


def test_a_pass_with_a_job_in_its_restart_backoff_is_never_idle(
    session: Session, leader: Leader
) -> None:
    pid, _, waiting = full_cluster(session, leader)
    session.execute(
        sa.update(Job)
        .where(Job.id == waiting.id)
        .values(not_before=utcnow() + dt.timedelta(seconds=60))
    )
    leader.run()
    assert leader.memo.idle is None  # its reason counts the seconds down: written anew
    reason = waiting.reason
    assert reason.startswith("restart backoff")
