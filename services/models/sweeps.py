"""The tables of sweeps: many trials of one job template over a search space.

Each trial is an ordinary job (`Job.sweep_id`, `Job.trial_index`), created lazily by
the scheduler pass (services/sweeps/); the sweep row holds the spec and the outcome, and
a `SweepTrial` row per trial what Optuna chose for it and its own state, from which the
pass rebuilds the sweep's study.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column, relationship

from services.models.base import Base, enum_column, utcnow
from services.models.jobs import Project
from services.statuses import SweepStatus


class Sweep(Base):
    """A sweep: its spec (services/sweeps/schemas.py `SweepCreate`, stored as JSON),
    how many trials it has created so far, and how it ended."""

    __tablename__ = "sweeps"
    __table_args__ = (
        # The scheduler pass reads only running sweeps.
        sa.Index("ix_sweeps_status", "status"),
        sa.Index("ix_sweeps_project_id_id", "project_id", "id"),
        # Exactly once per fire time of a schedule, however many schedulers race.
        sa.UniqueConstraint("schedule_id", "scheduled_for", name="uq_sweeps_schedule_fire"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(sa.ForeignKey("projects.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(sa.String(128))
    spec: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # The resolved seed of a sampled space (drawn at creation when the spec gave none).
    seed: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    trials_total: Mapped[int]
    trials_created: Mapped[int] = mapped_column(default=0)
    max_concurrent: Mapped[int]
    priority: Mapped[int] = mapped_column(default=0)  # the template's: trials carry it
    status: Mapped[SweepStatus] = mapped_column(
        enum_column(SweepStatus), default=SweepStatus.RUNNING
    )
    reason: Mapped[str] = mapped_column(sa.Text, default="")
    best_job_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("jobs.id", ondelete="SET NULL", use_alter=True, name="fk_sweeps_best_job")
    )
    best_value: Mapped[float | None] = mapped_column(sa.Float)
    stops_early: Mapped[bool] = mapped_column(default=False)  # the spec has early_stopping
    # When the early-stopping rule last judged its running trials (it runs every few seconds).
    stopping_checked_at: Mapped[dt.datetime | None]
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    finished_at: Mapped[dt.datetime | None]
    # Set on sweeps a schedule fired (services/retraining/firing.py); NULL otherwise.
    schedule_id: Mapped[int | None] = mapped_column(
        sa.ForeignKey("schedules.id", ondelete="SET NULL"), index=True
    )
    scheduled_for: Mapped[dt.datetime | None]
    # The fire's variables (services/retraining/fire_env.py), which its trials carry.
    # NULL, without a default, for rows no schedule made: their INSERT leaves it out.
    schedule_env: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)

    project: Mapped[Project] = relationship(lazy="joined")


class SweepTrial(Base):
    """One trial of a sweep, by index: the parameters its job got, and Optuna's system
    attributes of the trial (the grid point, CMA-ES's generation and saved state, the
    values a successive-halving pruner recorded at each rung). Its job is the one with the
    same `(sweep_id, trial_index)`; a row may precede its job (parameters fixed ahead)."""

    __tablename__ = "sweep_trials"

    sweep_id: Mapped[int] = mapped_column(
        sa.ForeignKey("sweeps.id", ondelete="CASCADE"), primary_key=True
    )
    trial_index: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    parameters: Mapped[dict[str, Any]] = mapped_column(default=dict)
    system_attrs: Mapped[dict[str, Any]] = mapped_column(default=dict)
