"""A queued job's place in the queue, in the placer's order (priority, then submission)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.models import Job
from services.statuses import JobStatus


def queue_position(*, session: Session, job: Job) -> int | None:
    """1 for the job the scheduler considers first, 2 for the next...; None unless queued.

    Counted across every project: the pool, and so the queue, is shared.
    """
    if job.status != JobStatus.QUEUED:
        return None
    ahead = session.execute(
        sa.select(sa.func.count()).select_from(Job).where(
            Job.status == JobStatus.QUEUED,
            sa.or_(Job.priority > job.priority,
                   sa.and_(Job.priority == job.priority, Job.id < job.id)))
    ).scalar_one()
    return int(ahead) + 1
