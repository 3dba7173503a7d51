import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.exceptions import InvalidTransition
from services.jobs.transitions import lock_jobs, transition_job, transition_locked
from services.models import JobEvent
from services.statuses import JobStatus
from tests.factories import create_job, create_token


def test_transition_records_event_and_timestamps(session: Session) -> None:
    _, token = create_token(session)
    job = create_job(session, token.project_id, replicas=1, strategy="one_device")
    transition_job(session=session, job_id=job.id, target=JobStatus.SCHEDULED, reason="placed")
    transition_job(session=session, job_id=job.id, target=JobStatus.RUNNING, reason="started")
    transition_job(session=session, job_id=job.id, target=JobStatus.SUCCEEDED, reason="done")
    events = (
        session.execute(sa.select(JobEvent).where(JobEvent.job_id == job.id).order_by(JobEvent.id))
        .scalars()
        .all()
    )
    assert [(e.from_status, e.to_status, e.reason) for e in events] == [
        (None, JobStatus.QUEUED, "submitted"),
        (JobStatus.QUEUED, JobStatus.SCHEDULED, "placed"),
        (JobStatus.SCHEDULED, JobStatus.RUNNING, "started"),
        (JobStatus.RUNNING, JobStatus.SUCCEEDED, "done"),
    ]
    assert job.started_at is not None and job.finished_at is not None
    assert job.reason == "done"


def test_terminal_is_final(session: Session) -> None:
    _, token = create_token(session)
    job = create_job(session, token.project_id)
    transition_job(session=session, job_id=job.id, target=JobStatus.CANCELLED)
    with pytest.raises(InvalidTransition):
        transition_job(session=session, job_id=job.id, target=JobStatus.SCHEDULED)


def test_same_status_twice_is_refused(session: Session) -> None:
    _, token = create_token(session)
    job = create_job(session, token.project_id)
    transition_job(session=session, job_id=job.id, target=JobStatus.SCHEDULED)
    with pytest.raises(InvalidTransition):
        transition_job(session=session, job_id=job.id, target=JobStatus.SCHEDULED)


def test_restart_bumps_attempt_and_stale_attempt_is_refused(session: Session) -> None:
    _, token = create_token(session)
    job = create_job(session, token.project_id, restart_policy="on_failure", max_restarts=1)
    transition_job(session=session, job_id=job.id, target=JobStatus.SCHEDULED)
    transition_job(session=session, job_id=job.id, target=JobStatus.RESTARTING)
    transition_job(session=session, job_id=job.id, target=JobStatus.QUEUED)
    assert job.attempt == 2
    with pytest.raises(InvalidTransition):
        transition_job(session=session, job_id=job.id, target=JobStatus.SCHEDULED, attempt=1)
    transition_job(session=session, job_id=job.id, target=JobStatus.SCHEDULED, attempt=2)
    assert job.status is JobStatus.SCHEDULED


def test_many_locked_jobs_move_at_once_each_with_its_event(session: Session) -> None:
    _, token = create_token(session)
    first, second = (
        create_job(session, token.project_id, replicas=1, strategy="one_device") for _ in range(2)
    )
    locked = lock_jobs(session=session, job_ids=[second.id, first.id, 10**9])
    assert sorted(locked) == [first.id, second.id]  # a job that does not exist is left out
    transition_locked(
        session=session,
        jobs=list(locked.values()),
        target=JobStatus.SCHEDULED,
        reasons={first.id: "placed on n1", second.id: "placed on n2"},
    )
    assert (first.status, first.reason) == (JobStatus.SCHEDULED, "placed on n1")
    assert (second.status, second.reason) == (JobStatus.SCHEDULED, "placed on n2")
    events = (
        session.execute(
            sa.select(JobEvent.job_id, JobEvent.from_status, JobEvent.to_status)
            .where(JobEvent.to_status == JobStatus.SCHEDULED)
            .order_by(JobEvent.job_id)
        )
        .tuples()
        .all()
    )
    assert events == [
        (first.id, JobStatus.QUEUED, JobStatus.SCHEDULED),
        (second.id, JobStatus.QUEUED, JobStatus.SCHEDULED),
    ]


def test_many_locked_jobs_one_refused_moves_none(session: Session) -> None:
    _, token = create_token(session)
    queued, cancelled = (
        create_job(session, token.project_id, replicas=1, strategy="one_device") for _ in range(2)
    )
    transition_job(session=session, job_id=cancelled.id, target=JobStatus.CANCELLED)
    locked = lock_jobs(session=session, job_ids=[queued.id, cancelled.id])
    with pytest.raises(InvalidTransition):
        transition_locked(
            session=session, jobs=list(locked.values()), target=JobStatus.SCHEDULED, reasons={}
        )
    assert queued.status is JobStatus.QUEUED
