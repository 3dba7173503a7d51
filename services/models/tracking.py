"""Tables of the MLflow export (services/tracking/): where each project's jobs are
tracked, from which job on, and how far each job's run has been written."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from services.models.base import Base, utcnow


class ProjectTracking(Base):
    """An admin's MLflow settings for one project, over the cluster's
    (COHORT_MLFLOW_TRACKING_URI). A project without a row takes the cluster's."""

    __tablename__ = "project_tracking"

    project_id: Mapped[int] = mapped_column(
        sa.ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True
    )
    # NULL: the cluster's tracking URI; "": none (this project's jobs are not exported).
    tracking_uri: Mapped[str | None] = mapped_column(sa.String(1024))
    # NULL: the experiment named after the project.
    experiment: Mapped[str | None] = mapped_column(sa.String(256))
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class TrackingStart(Base):
    """Since when a project's jobs are exported to its tracking URI: those not finished
    `since` (when the exporter first saw the URI in force), all above `after_job_id` (below
    its first job still live then; moved up as older jobs all have their export row). A
    new URI starts again: turning tracking on sends the jobs in flight and those to come,
    never a project's history."""

    __tablename__ = "tracking_starts"

    project_id: Mapped[int] = mapped_column(
        sa.ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True
    )
    tracking_uri: Mapped[str] = mapped_column(sa.String(1024))
    after_job_id: Mapped[int]
    since: Mapped[dt.datetime]


class MlflowRun(Base):
    """One job's MLflow run and how far it has been written: the exporter's cursor.

    Points go in id order (one writer stores them, one commit at a time:
    workers/control/ingest.py), so `metric_cursor`, the id of the last point MLflow took,
    says exactly which are left; it is committed after MLflow answered, so a restart
    sends at most one batch again, which MLflow's store keeps once (same key, step,
    timestamp and value)."""

    __tablename__ = "mlflow_runs"
    __table_args__ = (
        # The exporter reads the runs still open every round.
        sa.Index(
            "ix_mlflow_runs_open",
            "job_id",
            postgresql_where=sa.text("ended_at IS NULL"),
            sqlite_where=sa.text("ended_at IS NULL"),
        ),
    )

    job_id: Mapped[int] = mapped_column(
        sa.ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True
    )
    # Fixed when the job is first seen: a run lives on one server, whatever changes later.
    tracking_uri: Mapped[str] = mapped_column(sa.String(1024))
    experiment: Mapped[str] = mapped_column(sa.String(256))
    # Tagged on the run (cohort.export_key): a run created just before a crash is found
    # again rather than made twice.
    export_key: Mapped[str] = mapped_column(sa.String(32))
    experiment_id: Mapped[str | None] = mapped_column(sa.String(64))
    run_id: Mapped[str | None] = mapped_column(sa.String(64))
    metric_cursor: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    points: Mapped[int] = mapped_column(sa.BigInteger, default=0)  # exported so far
    # The job's status the run's tags last said ("": none yet).
    status_logged: Mapped[str] = mapped_column(sa.String(16), default="")
    ended_at: Mapped[dt.datetime | None]  # the run ended in MLflow: nothing left to do
    failures: Mapped[int] = mapped_column(default=0)  # in a row; 0 once one succeeds
    error: Mapped[str] = mapped_column(sa.Text, default="")
    retry_at: Mapped[dt.datetime | None]
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
