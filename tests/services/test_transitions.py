import datetime as dt
from pathlib import Path
from typing import cast

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from cli.stack import migrate
from services.db import make_engine
from services.exceptions import InvalidTransition
from services.jobs.transitions import lock_jobs, transition_job, transition_locked
from services.models import Job, JobEvent, utcnow
from services.statuses import JobStatus
from tests.factories import create_job, create_token

JobTable = cast(sa.Table, Job.__table__)


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


def _rows(session: Session, *jobs: Job) -> list[tuple[object, ...]]:
    """The jobs' moved columns as SQL holds them (not as the session's objects do)."""
    query = sa.select(
        JobTable.c.status,
        JobTable.c.reason,
        JobTable.c.attempt,
        JobTable.c.started_at,
        JobTable.c.finished_at,
        JobTable.c.updated_at,
        JobTable.c.not_before,
    ).where(JobTable.c.id.in_([job.id for job in jobs]))
    return [tuple(row) for row in session.connection().execute(query.order_by(JobTable.c.id))]


def _move_two(
    session: Session, *, pending: bool, sent: list[str] | None = None
) -> tuple[Job, Job, dt.datetime]:
    """Two scheduled jobs moved to running at once, the second started before (the move
    sets the first's started_at only), the first with a change of its own pending if
    `pending`; the time before the move. The move's SQL statements into `sent`."""
    _, token = create_token(session)
    first, second = (
        create_job(session, token.project_id, replicas=1, strategy="one_device") for _ in range(2)
    )
    for job in (first, second):
        transition_job(session=session, job_id=job.id, target=JobStatus.SCHEDULED)
    second.started_at = utcnow() - dt.timedelta(minutes=5)
    session.flush()
    locked = lock_jobs(session=session, job_ids=[first.id, second.id])
    before = utcnow()
    if pending:
        locked[first.id].not_before = before  # a change of the caller's, not the move's
    if sent is not None:
        sa.event.listen(session.get_bind(), "before_cursor_execute", lambda *a: sent.append(a[2]))
    transition_locked(
        session=session,
        jobs=list(locked.values()),
        target=JobStatus.RUNNING,
        reasons={first.id: "all 1 replicas started"},
    )
    return first, second, before


def test_many_locked_jobs_move_in_one_statement_and_leave_nothing_to_write(
    session: Session,
) -> None:
    """One UPDATE for every job moved, though their changes differ (the ORM's flush
    wrote one per set of columns changed); the rows hold the move, the session's
    objects what the rows hold, and nothing of them is left to flush."""
    sent: list[str] = []
    first, second, before = _move_two(session, pending=False, sent=sent)
    assert len([text for text in sent if text.startswith("UPDATE jobs")]) == 1
    rows = _rows(session, first, second)
    assert first.started_at is not None and first.started_at >= before
    assert second.started_at is not None and second.started_at < before
    assert [row[:5] for row in rows] == [
        ("running", "all 1 replicas started", 1, first.started_at, None),
        ("running", "", 1, second.started_at, None),
    ]
    assert all(row[5] >= before for row in rows)  # updated_at: stamped by the move
    assert (first.updated_at, second.updated_at) == (rows[0][5], rows[1][5])
    del sent[:]
    session.flush()
    assert sent == []


def test_a_change_of_the_callers_to_a_moved_job_is_written_too(session: Session) -> None:
    first, second, before = _move_two(session, pending=True)
    rows = _rows(session, first, second)
    assert [(row[0], row[6]) for row in rows] == [("running", before), ("running", None)]


def test_many_locked_jobs_move_on_sqlite_as_on_postgresql(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cohort.db'}"
    migrate(url)
    with Session(make_engine(url)) as session:
        first, second, before = _move_two(session, pending=True)
        rows = _rows(session, first, second)
        assert [row[:3] for row in rows] == [
            ("running", "all 1 replicas started", 1),
            ("running", "", 1),
        ]
        assert [row[3] for row in rows] == [first.started_at, second.started_at]
        assert all(row[5] >= before for row in rows) and rows[0][6] == before
