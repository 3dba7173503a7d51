"""A queued job's place in the queue, in the placer's order: priority, then submission.

Counted within the job's own project: how many of the project's jobs go before it,
which is exact (fair sharing interleaves projects of equal priority, never reorders a
project's own jobs), and tells a user nothing about other projects' queues. The
cluster-wide place is for admins (`cluster_queue_positions`).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.models import Job
from services.statuses import JobStatus


def _places(session: Session, jobs: list[Job], per_project: bool) -> dict[int, int]:
    wanted = [job.id for job in jobs if job.status == JobStatus.QUEUED]
    if not wanted:
        return {}
    ranked = sa.select(
        Job.id,
        sa.func.row_number()
        .over(
            partition_by=Job.project_id if per_project else None,
            order_by=(Job.priority.desc(), Job.id),
        )
        .label("place"),
    ).where(Job.status == JobStatus.QUEUED)
    if per_project:
        ranked = ranked.where(Job.project_id.in_({job.project_id for job in jobs}))
    sub = ranked.subquery()
    rows = session.execute(sa.select(sub.c.id, sub.c.place).where(sub.c.id.in_(wanted))).tuples()
    return {job_id: int(place) for job_id, place in rows}


def queue_positions(*, session: Session, jobs: list[Job]) -> dict[int, int]:
    """Each queued job's place among its project's queued jobs: 1 for the one the
    scheduler considers first, 2 for the next... (jobs not queued are left out). One
    query for a whole page of jobs."""
    return _places(session, jobs, per_project=True)


def cluster_queue_positions(*, session: Session, jobs: list[Job]) -> dict[int, int]:
    """Each queued job's place among every project's queued jobs, by priority then
    submission (for admins: it tells of other projects' queues). Between projects of
    equal priority the placer takes turns by share, so this is an approximation there."""
    return _places(session, jobs, per_project=False)


def queue_position(*, session: Session, job: Job) -> int | None:
    """One job's place in its project's queue; None unless queued."""
    return queue_positions(session=session, jobs=[job]).get(job.id)
