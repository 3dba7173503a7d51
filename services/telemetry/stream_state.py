"""What the live streams tell about jobs, each read in its own short transaction: a job's
snapshot (the JobRead of `GET /jobs/{id}`), its newest stored ids, and the project's jobs
whose status changed after a job-event id."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.db import session_scope
from services.jobs import queue, store
from services.jobs.stream_marks import newest_ids as newest_of_jobs
from services.models import Job, JobEvent, LogLine, MetricPoint
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
        event_id, fingerprint = _fingerprints(session, [job])[job_id]
        view = read_job_view(session=session, job=job)
        return view.model_dump(mode="json"), event_id, fingerprint


def job_fingerprints(job_ids: list[int]) -> dict[int, tuple[Any, ...]]:
    """In its own transaction: the fingerprint `job_snapshot` gives of each job (() for
    a job that is gone), for any number of jobs in four queries: how the followers of a
    process learn which jobs' snapshots to read again."""
    with session_scope() as session:
        jobs = list(session.execute(sa.select(Job).where(Job.id.in_(job_ids))).scalars())
        found = _fingerprints(session, jobs)
    return {job_id: found[job_id][1] if job_id in found else () for job_id in job_ids}


def _fingerprints(session: Session, jobs: list[Job]) -> dict[int, tuple[int, tuple[Any, ...]]]:
    """Each job's newest event id, and a fingerprint that changes whenever the job's or a
    replica's status, or the job's place in the queue, does."""
    if not jobs:
        return {}
    ids = [job.id for job in jobs]
    events = dict(
        session.execute(
            sa.select(JobEvent.job_id, sa.func.max(JobEvent.id))
            .where(JobEvent.job_id.in_(ids))
            .group_by(JobEvent.job_id)
        )
        .tuples()
        .all()
    )
    replicas = store.read_current_replicas(session=session, jobs=jobs)
    places = queue.queue_positions(session=session, jobs=jobs)
    found = {}
    for job in jobs:
        event_id = int(events.get(job.id) or 0)
        found[job.id] = (
            event_id,
            (
                str(job.status),
                job.attempt,
                job.reason,
                places.get(job.id),
                event_id,
                tuple((r.index, str(r.status), r.exit_code) for r in replicas[job.id]),
            ),
        )
    return found


def jobs_newest_ids(job_ids: list[int]) -> dict[int, dict[str, int]]:
    """In its own transaction: the ids of each job's newest stored point and line, for
    any number of jobs in two statements on PostgreSQL (one per kind)."""
    with session_scope() as session:
        points = newest_of_jobs(session, MetricPoint, job_ids)
        lines = newest_of_jobs(session, LogLine, job_ids)
    return {job: {"metric": points[job], "log": lines[job]} for job in job_ids}


def project_changes(project_id: int, after: int | None) -> tuple[list[dict[str, Any]], int]:
    """In its own transaction: snapshots of the project's jobs with events after id
    `after` (or its newest jobs when `after` is None), oldest change first, and the
    newest event id of the project."""
    with session_scope() as session:
        newest = session.execute(
            sa.select(sa.func.coalesce(sa.func.max(JobEvent.id), 0))
            .join(Job, Job.id == JobEvent.job_id)
            .where(Job.project_id == project_id)
        ).scalar_one()
        if after is None:
            rows = session.execute(
                sa.select(Job)
                .where(Job.project_id == project_id)
                .order_by(Job.id.desc())
                .limit(NEWEST_FIRST)
            ).scalars()
            chosen = list(reversed(list(rows)))
        elif newest > after:
            ids = session.execute(
                sa.select(JobEvent.job_id, sa.func.max(JobEvent.id).label("last"))
                .join(Job, Job.id == JobEvent.job_id)
                .where(Job.project_id == project_id, JobEvent.id > after)
                .group_by(JobEvent.job_id)
                .order_by(sa.text("last"))
            ).all()
            by_id = {
                j.id: j
                for j in session.execute(
                    sa.select(Job).where(Job.id.in_([i for i, _ in ids]))
                ).scalars()
            }
            chosen = [by_id[i] for i, _ in ids if i in by_id]
        else:
            return [], after
        # As the list of jobs sends them: replicas and queue places in two queries.
        views = [
            view.model_dump(mode="json") for view in read_job_views(session=session, jobs=chosen)
        ]
        return views, int(newest)
