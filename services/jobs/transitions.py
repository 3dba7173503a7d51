"""transition_job(): the only writer of Job.status."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from services.exceptions import InvalidTransition, JobNotFound
from services.jobs.bulk_rows import insert_rows
from services.jobs.stream_marks import stream_marks
from services.models import Job, JobEvent, utcnow
from services.statuses import TERMINAL_STATUSES, JobStatus, is_allowed
from services.webhooks import payloads
from services.webhooks.outbox import emit


def lock_jobs(*, session: Session, job_ids: Sequence[int]) -> dict[int, Job]:
    """Re-read jobs with their rows locked (a no-op lock on SQLite, which serialises
    writers), in id order (two transactions locking overlapping sets cannot deadlock).
    Jobs that no longer exist are left out."""
    # Lock the row so the api (cancel) and the scheduler (placement, exits)
    # cannot both decide a job's next status from the same stale read. NO KEY UPDATE
    # (what a plain UPDATE takes): the id never changes. The ingest's FOR SHARE lock on
    # the job (services/telemetry/metrics.py current_attempts) conflicts with it: rows of
    # the job are stored either wholly before a status change or wholly after it, which
    # its marks record (services/jobs/stream_marks.py).
    jobs: dict[int, Job] = {}
    ordered = sorted(set(job_ids))
    for start in range(0, len(ordered), 5000):  # a bounded IN list per statement
        jobs.update(
            (job.id, job)
            for job in session.execute(
                sa.select(Job)
                .where(Job.id.in_(ordered[start : start + 5000]))
                .order_by(Job.id)
                .with_for_update(of=Job, key_share=True)
                .execution_options(populate_existing=True)
            ).scalars()
        )
    return jobs


def lock_job(*, session: Session, job_id: int) -> Job:
    """Re-read a job with its row locked (lock_jobs for one)."""
    job = lock_jobs(session=session, job_ids=[job_id]).get(job_id)
    if job is None:
        raise JobNotFound(job_id)
    return job


def transition_job(
    *,
    session: Session,
    job_id: int,
    target: JobStatus,
    reason: str = "",
    attempt: int | None = None,
) -> Job:
    """Move a job to `target`, checked against ALLOWED_TRANSITIONS, and record a JobEvent.

    Args:
        attempt: when given, the change is refused unless it is still the job's
            current attempt (a late report from an old gang must not move the job).

    Raises:
        JobNotFound: no such job.
        InvalidTransition: the edge is not in the table, or the attempt is stale.
    """
    target = JobStatus(target)  # a caller's plain string too: the events name its value
    job = lock_job(session=session, job_id=job_id)
    if attempt is not None and attempt != job.attempt:
        raise InvalidTransition(
            job_id, f"{job.status} (attempt {job.attempt})", f"{target} (attempt {attempt})"
        )
    session.add(
        JobEvent(**_move(job, target, reason, utcnow(), stream_marks(session, [job.id])[job.id]))
    )
    session.flush()
    _announce(session, [job])
    return job


def _announce(session: Session, jobs: Sequence[Job]) -> None:
    """The webhooks' events of the jobs that just ended, in this transaction: they are
    sent if and only if the change commits (services/webhooks/outbox.py)."""
    for job in jobs:
        if job.status in TERMINAL_STATUSES:
            emit(
                session,
                project_id=job.project_id,
                event=payloads.job_event(job.status),
                payload=payloads.job_payload(job),
            )


def note_job(
    *, session: Session, job_id: int, attempt: int, reason: str, at: dt.datetime | None = None
) -> bool:
    """Record what a job is doing without a change of status (a replica installing its
    packages while the job is scheduled): an event from its status to the same, in its
    stream's order like any other. Not for a stale attempt, nor a job that has ended;
    whether it was recorded. `at` dates it when something else counts from that instant
    (a drain's grace counts from the pass's clock, not from when its event was written)."""
    job = lock_job(session=session, job_id=job_id)
    if job.attempt != attempt or job.status in TERMINAL_STATUSES:
        return False
    marks = stream_marks(session, [job.id])[job.id]
    session.add(JobEvent(**_event_row(job, job.status, reason, at or utcnow(), marks)))
    session.flush()
    return True


def transition_locked(
    *, session: Session, jobs: Sequence[Job], target: JobStatus, reasons: Mapping[int, str]
) -> None:
    """transition_job for many jobs the caller has locked with lock_jobs in this
    transaction (a scheduling pass places hundreds of gangs: one lock and one flush for
    all of them). Checked and recorded as transition_job does; flushed once.

    Raises:
        InvalidTransition: an edge is not in the table (nothing is flushed).
    """
    for job in jobs:
        if not is_allowed(job.status, target):
            raise InvalidTransition(job.id, job.status, target)
    if not jobs:
        return
    now = utcnow()
    marks = stream_marks(session, [job.id for job in jobs])
    events = [_move(job, target, reasons.get(job.id, ""), now, marks[job.id]) for job in jobs]
    _store_moves(session, jobs)
    # The events as plain rows in one statement (no ORM objects), after the jobs' rows
    # as the flush used to order them; the flush then writes anything else pending.
    insert_rows(session, cast(sa.Table, JobEvent.__table__), events)
    session.flush()
    _announce(session, jobs)


# What _move writes of a job, and the ORM's own stamp of a change (Job.updated_at).
_MOVED = ("status", "reason", "attempt", "started_at", "finished_at")


def _store_moves(session: Session, jobs: Sequence[Job]) -> None:
    """The moved jobs' columns written in one statement, then recorded on the jobs as
    stored, so the session's flush writes them no more. The flush wrote an UPDATE per
    job, with the ORM's bookkeeping per row: ~30 ms of the 500 gangs' pass."""
    stamp = utcnow()  # Job.updated_at's onupdate, as the flush would have set it
    rows = [[getattr(job, name) for name in _MOVED] for job in jobs]
    # No autoflush first: it would write the very changes this statement writes.
    with session.no_autoflush:
        _write_moves(session, jobs, rows, stamp)
    for job, row in zip(jobs, rows, strict=True):
        for name, value in zip(_MOVED, row, strict=True):
            set_committed_value(job, name, value)
        set_committed_value(job, "updated_at", stamp)


def _write_moves(
    session: Session, jobs: Sequence[Job], rows: list[list[Any]], stamp: dt.datetime
) -> None:
    """UPDATE the jobs' _MOVED columns to `rows` (in `jobs`' order), stamped `stamp`."""
    if session.get_bind().dialect.name == "postgresql":
        columns = list(zip(*rows, strict=True))
        session.execute(
            sa.text(
                "UPDATE jobs SET status = v.status, reason = v.reason, attempt = v.attempt, "
                "started_at = v.started_at, finished_at = v.finished_at, updated_at = :stamp "
                "FROM unnest(CAST(:ids AS integer[]), CAST(:statuses AS varchar[]), "
                "CAST(:reasons AS text[]), CAST(:attempts AS integer[]), "
                "CAST(:started AS timestamptz[]), CAST(:finished AS timestamptz[])) "
                "AS v(id, status, reason, attempt, started_at, finished_at) "
                "WHERE jobs.id = v.id"
            ),
            {
                "stamp": stamp,
                "ids": [job.id for job in jobs],
                "statuses": [status.value for status in columns[0]],
                "reasons": list(columns[1]),
                "attempts": list(columns[2]),
                "started": list(columns[3]),
                "finished": list(columns[4]),
            },
        )
    else:  # SQLite, in-process: an executemany costs no round trips
        table = cast(sa.Table, Job.__table__)  # a mapped class's table is a Table
        session.execute(
            sa.update(table)
            .where(table.c.id == sa.bindparam("job_id"))
            .values({name: sa.bindparam(f"new_{name}") for name in (*_MOVED, "updated_at")}),
            [
                {"job_id": job.id, "new_updated_at": stamp}
                | {f"new_{name}": value for name, value in zip(_MOVED, row, strict=True)}
                for job, row in zip(jobs, rows, strict=True)
            ],
        )


def _move(
    job: Job, target: JobStatus, reason: str, now: dt.datetime, marks: tuple[int, int]
) -> dict[str, Any]:
    """The change itself, on a locked job whose edge is allowed: the one writer of
    Job.status; returns the event that records it (its row's values, for the caller to
    store) with its place in the job's stream (`marks`: the job's newest point and line,
    read under the job's lock)."""
    if not is_allowed(job.status, target):
        raise InvalidTransition(job.id, job.status, target)
    previous = job.status
    if previous is JobStatus.RESTARTING and target is JobStatus.QUEUED:
        job.attempt += 1  # a new gang: every later report must carry this attempt
    if target is JobStatus.RUNNING and job.started_at is None:
        job.started_at = now
    if target in TERMINAL_STATUSES:
        job.finished_at = now
    event = _event_row(job, previous, reason, now, marks)
    job.status = target
    job.reason = reason
    return {**event, "to_status": target}


def _event_row(
    job: Job, previous: JobStatus, reason: str, now: dt.datetime, marks: tuple[int, int]
) -> dict[str, Any]:
    """A JobEvent row's values: the job's move from `previous` to its status now (the
    same status for a note), at its place in the job's stream (`marks`: the job's newest
    point and line, read under its lock)."""
    return {
        "job_id": job.id,
        "attempt": job.attempt,
        "from_status": previous,
        "to_status": job.status,
        "reason": reason,
        "created_at": now,
        "metric_mark": marks[0],
        "log_mark": marks[1],
    }
