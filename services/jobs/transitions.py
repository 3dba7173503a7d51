"""transition_job(): the only writer of Job.status."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.exceptions import InvalidTransition, JobNotFound
from services.models import Job, JobEvent, utcnow
from services.statuses import TERMINAL_STATUSES, JobStatus, is_allowed


def lock_job(*, session: Session, job_id: int) -> Job:
    """Re-read a job with its row locked (a no-op lock on SQLite, which serialises writers)."""
    # Lock the row so the api (cancel) and the scheduler (placement, exits)
    # cannot both decide a job's next status from the same stale read. NO KEY UPDATE
    # (what a plain UPDATE takes): the id never changes, and so the metric ingest's
    # KEY SHARE lock on the job (services/telemetry/metrics.py) neither waits for it nor blocks it.
    job = session.execute(
        sa.select(Job).where(Job.id == job_id)
        .with_for_update(of=Job, key_share=True)
        .execution_options(populate_existing=True)
    ).scalar_one_or_none()
    if job is None:
        raise JobNotFound(job_id)
    return job


def transition_job(
    *, session: Session, job_id: int, target: JobStatus, reason: str = "",
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
    job = lock_job(session=session, job_id=job_id)
    if attempt is not None and attempt != job.attempt:
        raise InvalidTransition(job_id, f"{job.status} (attempt {job.attempt})",
                                f"{target} (attempt {attempt})")
    if not is_allowed(job.status, target):
        raise InvalidTransition(job_id, job.status, target)
    previous = job.status
    now = utcnow()
    if previous is JobStatus.RESTARTING and target is JobStatus.QUEUED:
        job.attempt += 1  # a new gang: every later report must carry this attempt
    if target is JobStatus.RUNNING and job.started_at is None:
        job.started_at = now
    if target in TERMINAL_STATUSES:
        job.finished_at = now
    job.status = target
    job.reason = reason
    session.add(
        JobEvent(job_id=job.id, attempt=job.attempt, from_status=previous, to_status=target,
                 reason=reason, created_at=now)
    )
    session.flush()
    return job
