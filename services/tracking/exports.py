"""The export's SQL: the runs still open with their jobs, the points after a run's cursor,
and each step recorded once MLflow has taken it (the caller commits: a leader's fenced
transaction). Failures are recorded on the run, and said in a live job's events."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.jobs.stream_marks import newest_ids
from services.jobs.transitions import note_job
from services.models import Job, MetricPoint, MlflowRun
from services.statuses import TERMINAL_STATUSES

RETRY_MAX = 60.0  # seconds: the longest wait before a failing run is tried again


@dataclass
class OpenRun:
    """An export not yet ended, its job as it is now, and the job's newest point."""

    export: MlflowRun
    job: Job
    newest_point: int

    @property
    def finished(self) -> bool:
        return self.job.status in TERMINAL_STATUSES

    @property
    def begun(self) -> bool:
        """Its run is made once the job has started (or ended without starting: a job
        cancelled in the queue is a KILLED run too)."""
        return self.job.started_at is not None or self.finished

    def needs_work(self) -> bool:
        """Whether MLflow has anything to hear about it now."""
        if self.export.run_id is None:
            return self.begun
        return (
            self.newest_point > self.export.metric_cursor
            or self.export.status_logged != self.job.status
            or self.finished
        )


def read_open_runs(
    *, session: Session, now: dt.datetime, after_job_id: int = 0, limit: int = 500
) -> list[OpenRun]:
    """A page of the open exports not waiting for a retry, of jobs above `after_job_id` in
    job order, with their jobs and newest points (three statements). Jobs still waiting in
    the queue are left out: nothing of them goes to MLflow yet."""
    rows = session.execute(
        sa.select(MlflowRun, Job)
        .join(Job, Job.id == MlflowRun.job_id)
        .where(
            MlflowRun.ended_at.is_(None),
            MlflowRun.job_id > after_job_id,
            sa.or_(MlflowRun.retry_at.is_(None), MlflowRun.retry_at <= now),
            sa.or_(
                MlflowRun.run_id.is_not(None),
                Job.started_at.is_not(None),
                Job.status.in_(TERMINAL_STATUSES),
            ),
        )
        .order_by(MlflowRun.job_id)
        .limit(limit)
    ).all()
    newest = newest_ids(session, MetricPoint, [job.id for _, job in rows])
    return [OpenRun(export, job, newest[job.id]) for export, job in rows]


# A point as the exporter reads it: (id, replica, step, name, value, ts).
POINT_COLUMNS = (
    MetricPoint.id,
    MetricPoint.replica,
    MetricPoint.step,
    MetricPoint.name,
    MetricPoint.value,
    MetricPoint.ts,
)


def read_points(*, session: Session, job_id: int, after: int, limit: int) -> list[tuple[Any, ...]]:
    """The job's points stored after id `after`, in id order (an index range on
    `(job_id, id)`)."""
    return [
        tuple(row)
        for row in session.execute(
            sa.select(*POINT_COLUMNS)
            .where(MetricPoint.job_id == job_id, MetricPoint.id > after)
            .order_by(MetricPoint.id)
            .limit(limit)
        )
    ]


def newest_point(*, session: Session, job_id: int) -> int:
    """The id of the job's newest stored point (0: none)."""
    return newest_ids(session, MetricPoint, [job_id])[job_id]


def record(*, session: Session, job_id: int, **done: Any) -> None:
    """A step MLflow took (the run made, points up to a cursor, the status tagged, the
    end): its columns, and the run's failures cleared."""
    session.execute(
        sa.update(MlflowRun)
        .where(MlflowRun.job_id == job_id)
        .values(failures=0, error="", retry_at=None, **done)
    )


def record_failure(
    *, session: Session, open_run: OpenRun, error: str, now: dt.datetime, retry_max: float
) -> None:
    """MLflow did not take a step: try again after a wait that doubles with each failure in a
    row (up to `retry_max` seconds); the first says so in the job's events while it is live."""
    failures = open_run.export.failures + 1
    wait = min(float(2**failures), retry_max)
    session.execute(
        sa.update(MlflowRun)
        .where(MlflowRun.job_id == open_run.job.id)
        .values(failures=failures, error=error[:2000], retry_at=now + dt.timedelta(seconds=wait))
    )
    if failures == 1:
        note(session, open_run, f"MLflow export failing, retrying: {error[:500]}")


def note(session: Session, open_run: OpenRun, reason: str) -> None:
    """Say `reason` in the job's events, while it is live (an event after a finished job's
    end would break its stream's rule that the end comes last)."""
    if not open_run.finished:
        job = open_run.job
        note_job(session=session, job_id=job.id, attempt=job.attempt, reason=reason)
