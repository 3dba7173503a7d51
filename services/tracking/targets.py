"""Where each project's jobs are tracked, and which of its jobs are: an admin's setting per
project over the cluster's (COHORT_MLFLOW_TRACKING_URI), and the jobs given an export row.

A project's jobs are exported from the moment the exporter first sees its tracking URI in
force: the jobs then queued or running and those submitted after (`TrackingStart`), never
its history. A job keeps the
server and experiment it was given then (its `MlflowRun` row), whatever changes later.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.exceptions import ProjectNotFound
from services.models import Job, MlflowRun, Project, ProjectTracking, TrackingStart
from services.settings import Settings
from services.statuses import TERMINAL_STATUSES
from services.tracking.schemas import TrackingRead, TrackingSettings, TrackingUpdate

# A job older than this has its export row if it ever will: a start moves past it. Job ids
# come from a sequence and commit in any order, so a job is only skipped if the
# transaction that made it stayed open this long (the api's and the scheduler's take
# seconds; PostgreSQL ends a fenced one idle past the leader's lock TTL).
SETTLED_AFTER = dt.timedelta(minutes=10)


@dataclass(frozen=True)
class Target:
    """Where a project's runs go."""

    tracking_uri: str
    experiment: str


def _overrides(row: ProjectTracking | None) -> TrackingSettings:
    if row is None:
        return TrackingSettings()
    return TrackingSettings(tracking_uri=row.tracking_uri, experiment=row.experiment)


def _in_force(project: Project, row: ProjectTracking | None, settings: Settings) -> Target:
    own = _overrides(row)
    uri = settings.MLFLOW_TRACKING_URI if own.tracking_uri is None else own.tracking_uri
    return Target(uri, own.experiment or project.name)


def _project(session: Session, name: str) -> Project:
    project = session.execute(sa.select(Project).where(Project.name == name)).scalar_one_or_none()
    if project is None:
        raise ProjectNotFound(name)
    return project


def read_tracking(*, session: Session, project_name: str, settings: Settings) -> TrackingRead:
    """A project's MLflow settings: in force, its own, the cluster's."""
    project = _project(session, project_name)
    row = session.get(ProjectTracking, project.id)
    target = _in_force(project, row, settings)
    return TrackingRead(
        project=project.name,
        tracking_uri=target.tracking_uri,
        experiment=target.experiment,
        overrides=_overrides(row),
        default_tracking_uri=settings.MLFLOW_TRACKING_URI,
    )


def set_tracking(
    *, session: Session, project_name: str, tracking_in: TrackingUpdate, settings: Settings
) -> TrackingRead:
    """Replace a project's own MLflow settings (jobs already exported stay where they are)."""
    project = _project(session, project_name)
    row = session.get(ProjectTracking, project.id)
    if row is None:
        row = ProjectTracking(project_id=project.id)
        session.add(row)
    row.tracking_uri = tracking_in.tracking_uri
    row.experiment = tracking_in.experiment
    session.flush()
    return read_tracking(session=session, project_name=project_name, settings=settings)


def read_targets(*, session: Session, settings: Settings) -> dict[int, Target]:
    """Every tracked project's target, by project id (one query)."""
    rows = session.execute(
        sa.select(Project, ProjectTracking).outerjoin(
            ProjectTracking, ProjectTracking.project_id == Project.id
        )
    ).all()
    targets = {project.id: _in_force(project, row, settings) for project, row in rows}
    return {pid: target for pid, target in targets.items() if target.tracking_uri}


def any_started(*, session: Session) -> bool:
    """Whether any project has a start (one may have to go: its tracking was turned off)."""
    return session.execute(sa.select(sa.exists().select_from(TrackingStart))).scalar_one()


def discover_jobs(*, session: Session, targets: dict[int, Target], now: dt.datetime) -> int:
    """Give each new job of a tracked project its export row; returns how many were given.

    A project tracked anew (or to a new URI) starts with its jobs not finished then; one no
    longer tracked loses its start, so tracking it again starts afresh. Each start then moves up
    past the jobs older than SETTLED_AFTER, which all have their row by then: each round
    reads the project's few newest jobs, not its history."""
    starts = {row.project_id: row for row in session.execute(sa.select(TrackingStart)).scalars()}
    for project_id, stale in starts.items():
        if project_id not in targets:
            session.delete(stale)
    given = 0
    for project_id, target in targets.items():
        start = starts.get(project_id)
        if start is None or start.tracking_uri != target.tracking_uri:
            after = _before_live_jobs(session, project_id)  # before the new row is flushed
            if start is None:
                start = TrackingStart(project_id=project_id)
                session.add(start)
            start.tracking_uri, start.after_job_id, start.since = target.tracking_uri, after, now
        new = list(
            session.execute(
                sa.select(Job.id).where(
                    Job.project_id == project_id,
                    Job.id > start.after_job_id,
                    sa.or_(Job.finished_at.is_(None), Job.finished_at >= start.since),
                    ~sa.exists().where(MlflowRun.job_id == Job.id),
                )
            ).scalars()
        )
        if new:
            session.execute(
                sa.insert(MlflowRun),
                [
                    {
                        "job_id": job_id,
                        "tracking_uri": target.tracking_uri,
                        "experiment": target.experiment,
                        "export_key": uuid.uuid4().hex,
                    }
                    for job_id in new
                ],
            )
            given += len(new)
        start.after_job_id = _newest_job(
            session, project_id, after=start.after_job_id, before=now - SETTLED_AFTER
        )
    session.flush()
    return given


def _before_live_jobs(session: Session, project_id: int) -> int:
    """The id below the project's first job not finished (its newest if all are)."""
    first_live = session.execute(
        sa.select(sa.func.min(Job.id)).where(
            Job.project_id == project_id, Job.status.not_in(TERMINAL_STATUSES)
        )
    ).scalar_one()
    return first_live - 1 if first_live is not None else _newest_job(session, project_id)


def _newest_job(
    session: Session, project_id: int, *, after: int = 0, before: dt.datetime | None = None
) -> int:
    """The id of the project's newest job (created before `before`), or `after` if none."""
    query = sa.select(sa.func.max(Job.id)).where(Job.project_id == project_id, Job.id > after)
    if before is not None:
        query = query.where(Job.created_at < before)
    return int(session.execute(query).scalar_one() or after)
