"""A queued job's place in the queue, in the placer's order (priority, then submission)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.models import Job
from services.statuses import JobStatus


def queue_positions(*, session: Session, jobs: list[Job]) -> dict[int, int]:
    """Each queued job's place: 1 for the job the scheduler considers first, 2 for the
    next... (jobs that are not queued are left out). One query for a whole page of jobs.

    Counted across every project: the pool, and so the queue, is shared.
    """
    wanted = [job.id for job in jobs if job.status == JobStatus.QUEUED]
    if not wanted:
        return {}
    ranked = sa.select(
        Job.id, sa.func.row_number().over(order_by=(Job.priority.desc(), Job.id)).label("place")
    ).where(Job.status == JobStatus.QUEUED).subquery()
    rows = session.execute(sa.select(ranked.c.id, ranked.c.place)
                           .where(ranked.c.id.in_(wanted))).tuples()
    return {job_id: int(place) for job_id, place in rows}


def queue_position(*, session: Session, job: Job) -> int | None:
    """One job's place in the queue; None unless queued."""
    return queue_positions(session=session, jobs=[job]).get(job.id)
