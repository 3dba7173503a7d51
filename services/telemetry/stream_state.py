"""What the live streams tell about jobs, each read in its own short transaction: a job's
snapshot (the JobRead of `GET /jobs/{id}`), its newest stored ids, and the project's jobs
whose status changed after a job-event id."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from services.db import session_scope
from services.models import Job, JobEvent
from services.telemetry import logs, metrics
from services.telemetry.job_views import read_job_view, read_job_views

NEWEST_FIRST = 50  # jobs a project stream starts with when it has no Last-Event-ID


def job_snapshot(job_id: int) -> tuple[dict[str, Any], int, tuple[Any, ...]]:
    """In its own transaction: the job as JSON (as `GET /jobs/{id}` sends it), its newest
    event id, and a fingerprint that changes whenever the job's or a replica's status, or
    the job's place in the queue, does (progress alone sends no new snapshot)."""
    with session_scope() as session:
        job = session.get(Job, job_id)
        if job is None:  # deleted while streaming
            return {}, 0, ()
        event_id = session.execute(sa.select(sa.func.coalesce(sa.func.max(JobEvent.id), 0))
                                   .where(JobEvent.job_id == job_id)).scalar_one()
        view = read_job_view(session=session, job=job)
        fingerprint = (view.status, view.attempt, view.reason, view.queue_position, event_id,
                       tuple((r.index, r.status, r.exit_code) for r in view.replica_list))
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
        # As the list of jobs sends them: replicas and queue places in two queries.
        views = [view.model_dump(mode="json")
                 for view in read_job_views(session=session, jobs=chosen)]
        return views, int(newest)
