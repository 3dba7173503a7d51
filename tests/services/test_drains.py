"""Drains against PostgreSQL: a gang with a replica on a drained node is asked to
checkpoint now, waits for its replicas' exits 75 (an exit breaks nothing meanwhile), then
moves without spending its restart budget; the grace's expiry; a gang that finishes
meanwhile succeeds. The clock is passed in."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.cluster import drains
from services.jobs import store as jobs
from services.models import Job, Replica
from services.scheduling import scheduler_pass
from services.statuses import JobStatus, ReplicaStatus
from services.wire.replica import CheckpointReplica, StopReplica
from tests.factories import create_job, create_token
from tests.services.test_failures import T0, beat, fail_replica, start_gang
from tests.services.test_failures import run as run_pass

GRACE = 120.0  # the default COHORT_DRAIN_GRACE


def draining_job(session: Session, **fields: object) -> Job:
    """A running 2-replica gang on node n1 (the test pass's only node), n1 drained."""
    _, token = create_token(session)
    job = create_job(session, token.project_id, replicas=2, restart_policy="never", **fields)
    start_gang(session, job, T0)
    drains.drain_node(session=session, node_id="n1", reason="maintenance", at=T0)
    return job


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def run(session: Session, now: dt.datetime) -> scheduler_pass.PassResult:
    """A pass whose heartbeat from n1 lists its live replicas as running (as its agent's
    would: one it no longer lists would be an exit the watchdog settles)."""
    live = session.execute(
        sa.select(Replica.job_id, Replica.attempt, Replica.index).where(
            Replica.status == ReplicaStatus.RUNNING
        )
    ).tuples()
    return run_pass(session, now, beat(now, running=frozenset(live)))


def test_a_drained_gang_checkpoints_then_moves_without_spending_a_restart(
    session: Session,
) -> None:
    job = draining_job(session)
    asked = [m for m in run(session, at(1)).messages if isinstance(m, CheckpointReplica)]
    assert sorted(m.index for m in asked) == [0, 1]
    assert {(m.node_id, m.job_id, m.attempt) for m in asked} == {("n1", job.id, 1)}
    # Asked once: the next pass sends nothing more.
    assert not [m for m in run(session, at(2)).messages if isinstance(m, CheckpointReplica)]
    # Replica 0 has saved and exited 75: its peer is saving, the gang waits for it.
    fail_replica(session, job, 0, 75, at(3))
    run(session, at(4))
    assert job.status is JobStatus.RUNNING and job.attempt == 1
    fail_replica(session, job, 1, 75, at(5))
    assert job.status is JobStatus.RUNNING  # the exit breaks nothing: the drain moves it
    run(session, at(6))
    # restart_policy "never", yet it moved: a move is not a restart.
    assert job.attempt == 2 and job.moved_attempts == 1, job.reason
    assert job.status in (JobStatus.QUEUED, JobStatus.SCHEDULED)
    events = [e.reason for e in jobs.read_events(session=session, job=job)]
    assert any("node n1 drained: asked its 2 replicas to checkpoint now" in r for r in events)
    moved = next(r for r in events if r.startswith("drained from node n1"))
    assert "all 2 replicas checkpointed (exit 75)" in moved
    assert "not counted as a restart" in moved
    # The new attempt is not placed back on the drained node (the only one here).
    assert job.status is JobStatus.QUEUED


def test_the_grace_running_out_stops_the_gang_and_moves_it(session: Session) -> None:
    job = draining_job(session)
    run(session, at(1))
    fail_replica(session, job, 0, 75, at(2))
    messages = run(session, at(1 + GRACE - 1)).messages
    assert job.status is JobStatus.RUNNING and not messages
    messages = run(session, at(1 + GRACE)).messages
    assert job.status is JobStatus.RESTARTING and job.moved_attempts == 1
    stops = [m for m in messages if isinstance(m, StopReplica)]
    assert [(m.index, m.attempt) for m in stops] == [(1, 1)]  # only the one still alive
    assert "grace of 120s ran out and the other 1 were stopped" in job.reason
    # The request's event is dated by the clock its grace counts from, so the events show
    # at least the grace between the ask and the move (not the moment the row was written).
    asked = next(e for e in jobs.read_events(session=session, job=job) if "asked its" in e.reason)
    assert asked.created_at == at(1)


def test_a_gang_that_ends_while_draining_succeeds(session: Session) -> None:
    job = draining_job(session)
    run(session, at(1))
    fail_replica(session, job, 0, 0, at(2))
    fail_replica(session, job, 1, 0, at(3))
    run(session, at(4))
    assert job.status is JobStatus.SUCCEEDED and job.moved_attempts == 0


def test_a_gang_not_yet_running_moves_at_once(session: Session) -> None:
    _, token = create_token(session)
    job = create_job(session, token.project_id, replicas=2)
    run(session, T0)
    assert job.status is JobStatus.SCHEDULED
    drains.drain_node(session=session, node_id="n1", reason="maintenance", at=T0)
    messages = run(session, at(1)).messages
    assert job.moved_attempts == 1 and job.attempt >= 1
    assert not [m for m in messages if isinstance(m, CheckpointReplica)]
    assert "before its gang started" in next(
        e.reason for e in jobs.read_events(session=session, job=job) if "drained from" in e.reason
    )


def test_an_undrained_node_takes_gangs_again(session: Session) -> None:
    job = draining_job(session)
    run(session, at(1))
    fail_replica(session, job, 0, 75, at(2))
    fail_replica(session, job, 1, 75, at(3))
    run(session, at(4))
    assert job.status is JobStatus.QUEUED  # n1 is drained, and the only node
    for replica in jobs.read_replicas(session=session, job=job, attempt=1):
        assert replica.status is ReplicaStatus.FAILED and replica.exit_code == 75
    drains.undrain_node(session=session, node_id="n1", at=at(5))
    run(session, at(5))
    assert job.status is JobStatus.SCHEDULED and job.attempt == 2
