"""What the live streams tell about jobs: a job's snapshot (JobRead with progress) and
the project's jobs whose status changed after a job-event id."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.db import session_scope
from services.jobs import store as jobs
from services.jobs.schemas import JobRead, ReplicaRead
from services.models import Job, JobEvent, Replica
from services.telemetry import logs, metrics, progress

NEWEST_FIRST = 50  # jobs a project stream starts with when it has no Last-Event-ID


def read_job_view(*, session: Session, job: Job, with_progress: bool = True) -> JobRead:
    """A job with the replicas of its current attempt (and its progress)."""
    view = JobRead.model_validate(job)
    view.replica_list = [ReplicaRead.model_validate(r)
                         for r in jobs.read_replicas(session=session, job=job)]
    if with_progress:
        view.progress = progress.read_progress(session=session, job=job)
    return view


def job_snapshot(job_id: int) -> tuple[dict[str, Any], int, tuple[Any, ...]]:
    """In its own transaction: the job as JSON, its newest event id, and a fingerprint
    that changes whenever the job's or a replica's status does."""
    with session_scope() as session:
        job = session.get(Job, job_id)
        if job is None:  # deleted while streaming
            return {}, 0, ()
        event_id = session.execute(sa.select(sa.func.coalesce(sa.func.max(JobEvent.id), 0))
                                   .where(JobEvent.job_id == job_id)).scalar_one()
        replicas = session.execute(
            sa.select(Replica.index, Replica.status, Replica.exit_code)
            .where(Replica.job_id == job_id, Replica.attempt == job.attempt)
            .order_by(Replica.index)).all()
        fingerprint = (job.status, job.attempt, job.reason, event_id,
                       tuple(tuple(r) for r in replicas))
        view = read_job_view(session=session, job=job)
        return view.model_dump(mode="json"), int(event_id), fingerprint


def newest_ids(job_id: int) -> dict[str, int]:
    """In its own transaction: the ids of the job's newest stored point and line."""
    with session_scope() as session:
        return {"metric": metrics.newest_point_id(session=session, job_id=job_id),
                "log": logs.newest_line_id(session=session, job_id=job_id)}


def project_changes(project_id: int, after: int | None) -> tuple[list[dict[str, Any]], int]:
    """In its own transaction: snapshots of the project's jobs with events after id
    `after` (or its newest jobs when `after` is None), oldest change first, and the
    newest event id of the project."""
    with session_scope() as session:
        newest = session.execute(
            sa.select(sa.func.coalesce(sa.func.max(JobEvent.id), 0))
            .join(Job, Job.id == JobEvent.job_id).where(Job.project_id == project_id)
        ).scalar_one()
        if after is None:
            rows = session.execute(sa.select(Job).where(Job.project_id == project_id)
                                   .order_by(Job.id.desc()).limit(NEWEST_FIRST)).scalars()
            chosen = list(reversed(list(rows)))
        elif newest > after:
            ids = session.execute(
                sa.select(JobEvent.job_id, sa.func.max(JobEvent.id).label("last"))
                .join(Job, Job.id == JobEvent.job_id)
                .where(Job.project_id == project_id, JobEvent.id > after)
                .group_by(JobEvent.job_id).order_by(sa.text("last"))).all()
            by_id = {j.id: j for j in session.execute(
                sa.select(Job).where(Job.id.in_([i for i, _ in ids]))).scalars()}
            chosen = [by_id[i] for i, _ in ids if i in by_id]
        else:
            return [], after
        views = [read_job_view(session=session, job=job, with_progress=False)
                 .model_dump(mode="json") for job in chosen]
        return views, int(newest)
