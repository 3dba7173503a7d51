"""Tables of retraining schedules and their runs."""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column, relationship

from services.models.base import Base, utcnow
from services.models.data_files import DataFileRecord
from services.models.jobs import Project


class Schedule(Base):
    """A retraining schedule: a job template fired on a cron expression or an interval."""

    __tablename__ = "schedules"
    __table_args__ = (
        sa.UniqueConstraint("project_id", "name", name="uq_schedules_project_name"),
        sa.Index("ix_schedules_due", "paused", "next_fire_at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(sa.ForeignKey("projects.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(sa.String(64))
    job_template: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # A schedule fires either a job (`job_template`) or a sweep (this, a SweepCreate).
    sweep_template: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)
    cron: Mapped[str | None] = mapped_column(sa.String(128))
    interval_seconds: Mapped[int | None]
    timezone: Mapped[str] = mapped_column(sa.String(64), default="UTC")
    concurrency_policy: Mapped[str] = mapped_column(sa.String(16), default="allow")
    starting_deadline_seconds: Mapped[int | None]
    successful_jobs_history_limit: Mapped[int | None]
    failed_jobs_history_limit: Mapped[int | None]
    paused: Mapped[bool] = mapped_column(default=False)
    next_fire_at: Mapped[dt.datetime | None]
    last_fired_at: Mapped[dt.datetime | None]
    last_outcome: Mapped[str] = mapped_column(sa.String(32), default="")
    promote_metric: Mapped[str | None] = mapped_column(sa.String(64))
    promote_mode: Mapped[str] = mapped_column(sa.String(8), default="max")
    # Where a promotion goes in the model registry: the model (NULL: the schedule's name)
    # and the alias moved to the new version (NULL: "production").
    promote_model: Mapped[str | None] = mapped_column(sa.String(64))
    promote_alias: Mapped[str | None] = mapped_column(sa.String(64))
    promoted_job_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey(
            "jobs.id", ondelete="SET NULL", use_alter=True, name="fk_schedules_promoted_job"
        )
    )
    promoted_value: Mapped[float | None] = mapped_column(sa.Float)
    # Champion against challenger (services/retraining/evaluation.py): the schedule's
    # `evaluate:` block as given (an Evaluate), or NULL to judge on the training metric.
    evaluate: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)
    # Where the data interval of the next timed run starts: the end of the last one a
    # run was made for (services/retraining/fire_env.py); NULL: from created_at.
    covered_until: Mapped[dt.datetime | None]
    # A data trigger (services/retraining/data_triggers.py): the <path or prefix> of
    # its "data/<path or prefix>" (relative to the project's data),
    # fired once its newest change is settle_seconds old.
    trigger_path: Mapped[str | None] = mapped_column(sa.String(1024))
    trigger_settle_seconds: Mapped[int] = mapped_column(default=30)
    # The newest change under trigger_path the pass has looked at: nothing newer, nothing
    # to do (the pass's cheap check, without reading the store).
    data_seen_at: Mapped[dt.datetime | None]
    # The last content handled (its digest) and its newest change: the next data run's
    # interval starts there.
    data_version: Mapped[str | None] = mapped_column(sa.String(80))
    data_version_at: Mapped[dt.datetime | None]
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)

    project: Mapped[Project] = relationship(lazy="joined")


class ScheduleRun(Base):
    """The record of one fire time of a schedule: what happened, and the promotion decision."""

    __tablename__ = "schedule_runs"
    __table_args__ = (
        sa.UniqueConstraint("schedule_id", "scheduled_for", name="uq_schedule_runs_fire"),
        # A data version fires a schedule once (NULL for timed runs: never equal).
        sa.UniqueConstraint("schedule_id", "data_version", name="uq_schedule_runs_data"),
        sa.Index("ix_schedule_runs_pending", "decision"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    schedule_id: Mapped[int] = mapped_column(sa.ForeignKey("schedules.id", ondelete="CASCADE"))
    scheduled_for: Mapped[dt.datetime]
    job_id: Mapped[int | None] = mapped_column(sa.ForeignKey("jobs.id", ondelete="SET NULL"))
    # The sweep this run fired (a sweep schedule); promotion then considers its best trial.
    sweep_id: Mapped[int | None] = mapped_column(sa.ForeignKey("sweeps.id", ondelete="SET NULL"))
    # The digest of the data content this run was for (data triggers); NULL otherwise.
    data_version: Mapped[str | None] = mapped_column(sa.String(80))
    outcome: Mapped[str] = mapped_column(sa.String(32))  # fired, triggered, skipped, missed
    reason: Mapped[str] = mapped_column(sa.Text, default="")
    # Promotion: pending until the job ends (and its evaluations, with `evaluate:`); then
    # promoted, kept, no_metric, not_eligible or evaluation_failed.
    decision: Mapped[str | None] = mapped_column(sa.String(32))
    metric_value: Mapped[float | None] = mapped_column(sa.Float)
    decision_reason: Mapped[str] = mapped_column(sa.Text, default="")
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    decided_at: Mapped[dt.datetime | None]


class Evaluation(Base):
    """One model (a job's model artifact) evaluated on one content of a schedule's holdout
    by an evaluation job, for a run's decision; unique per (run, model, holdout digest), so
    two schedulers or a retried pass make each evaluation job once."""

    __tablename__ = "evaluations"
    __table_args__ = (
        sa.UniqueConstraint(
            "run_id", "model_job_id", "holdout_digest", name="uq_evaluations_run_model_holdout"
        ),
        # A holder's evaluation on a digest, which later runs reuse.
        sa.Index("ix_evaluations_model", "schedule_id", "model_job_id", "holdout_digest"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    schedule_id: Mapped[int] = mapped_column(sa.ForeignKey("schedules.id", ondelete="CASCADE"))
    # The run whose decision asked for it (a holder's evaluation may serve later ones too).
    run_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("schedule_runs.id", ondelete="SET NULL")
    )
    model_job_id: Mapped[int | None] = mapped_column(sa.ForeignKey("jobs.id", ondelete="SET NULL"))
    job_id: Mapped[int | None] = mapped_column(sa.ForeignKey("jobs.id", ondelete="SET NULL"))
    holdout_path: Mapped[str] = mapped_column(sa.String(1024))
    holdout_digest: Mapped[str] = mapped_column(sa.String(80))
    metric: Mapped[str] = mapped_column(sa.String(64))
    value: Mapped[float | None] = mapped_column(sa.Float)
    # running, succeeded (value set), failed (reason says why)
    status: Mapped[str] = mapped_column(sa.String(16), default="running")
    reason: Mapped[str] = mapped_column(sa.Text, default="")
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[dt.datetime | None]


# The data-trigger pass's probe (services/retraining/data_triggers.py): a project's data
# changes since a time, without reading its other rows.
sa.Index("ix_data_files_changes", DataFileRecord.project_id, DataFileRecord.updated_at)
