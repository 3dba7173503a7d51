"""A job's progress: its chief's current step (and epoch), and, where the job's length is
known, the total, percent done and an ETA.

The length is known for the built-in trainers (their hyperparameters hold epochs and
steps_per_epoch, defaults included) and for a trainer whose job gave both: they report
a `step_time` point per step (the callbacks of `ctx.callbacks()`; one in several above a
rate, workers/step_records.py), so the newest is the current step and the recent ones
give the step rate. A command, or a trainer whose job
named no length, runs as long as its own code says: its progress is what it reported,
the newest step of any point of the chief (TensorBoard scalars, `cohort.report()`), with
its epoch if the point carried one; never a total, a percent or an ETA taken from
defaults it never ran by.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeGuard

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.jobs.schemas import JobProgress
from services.jobs.spec_parts import Hyperparameters
from services.jobs.trainers import BUILTIN_TRAINERS
from services.models import Job, MetricPoint
from services.statuses import JobStatus

RATE_WINDOW = 50  # points the rate is measured over (their steps over their seconds: a
# sampled step stands for several, workers/step_records.py), recent enough to follow a slowdown
# The built-in trainers' length when a stored job (an old row) does not name it.
DEFAULT_EPOCHS = int(Hyperparameters.model_fields["epochs"].default)
DEFAULT_STEPS_PER_EPOCH = int(Hyperparameters.model_fields["steps_per_epoch"].default)


@dataclass(frozen=True)
class Length:
    epochs: int
    steps_per_epoch: int

    @property
    def total(self) -> int:
        return self.epochs * self.steps_per_epoch


def job_length(trainer: str | None, hyperparameters: dict[str, Any]) -> Length | None:
    """How many epochs of how many steps the job runs, if Cohort can know it."""
    epochs, steps = hyperparameters.get("epochs"), hyperparameters.get("steps_per_epoch")
    if trainer in BUILTIN_TRAINERS:
        return Length(int(epochs or DEFAULT_EPOCHS), int(steps or DEFAULT_STEPS_PER_EPOCH))
    if trainer is None or not (_count(epochs) and _count(steps)):
        return None  # a command, or a trainer that named no length
    return Length(epochs, steps)


def _count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def read_progress(*, session: Session, job: Job) -> JobProgress:
    """Where `job` is: its chief's step (and epoch); with a known length, of the total,
    percent and ETA (seconds)."""
    length = job_length(job.trainer, job.hyperparameters or {})
    name = "step_time" if length is not None else _newest_name(session, job)
    recent = [] if name is None else _recent_steps(session, job, name)
    rate = _rate(recent)
    if length is None:
        return JobProgress(
            step=int(recent[0].step) if recent else 0,
            total_steps=None,
            epoch=None if not recent or recent[0].epoch is None else recent[0].epoch + 1,
            epochs=None,
            percent=None,
            steps_per_second=round(rate, 3) if rate else None,
            eta_seconds=None,
        )
    total = length.total
    step = min(total, int(recent[0].step)) if recent else 0
    if job.status == JobStatus.SUCCEEDED:
        step = total
    eta = None
    if job.status == JobStatus.SUCCEEDED:
        eta = 0.0
    elif rate and job.status == JobStatus.RUNNING:
        eta = round((total - step) / rate, 1)
    return JobProgress(
        step=step,
        total_steps=total,
        epoch=min(length.epochs, (step - 1) // length.steps_per_epoch + 1) if step else 0,
        epochs=length.epochs,
        percent=round(100.0 * step / total, 1),
        steps_per_second=round(rate, 3) if rate else None,
        eta_seconds=eta,
    )


def _chief_points(job: Job) -> Any:
    return (
        MetricPoint.job_id == job.id,
        MetricPoint.attempt == job.attempt,
        MetricPoint.replica == 0,
    )


def _newest_name(session: Session, job: Job) -> str | None:
    """The series of the chief's newest step (any name: a command chooses its own)."""
    return session.execute(
        sa.select(MetricPoint.name)
        .where(*_chief_points(job))
        .order_by(MetricPoint.step.desc(), MetricPoint.id.desc())
        .limit(1)
    ).scalar_one_or_none()


def _recent_steps(session: Session, job: Job, name: str) -> list[Any]:
    """The chief's newest points of `name`, newest first (step, epoch, ts)."""
    return list(
        session.execute(
            sa.select(MetricPoint.step, MetricPoint.epoch, MetricPoint.ts)
            .where(*_chief_points(job), MetricPoint.name == name)
            .order_by(MetricPoint.step.desc())
            .limit(RATE_WINDOW)
        ).all()
    )


def _rate(recent: list[Any]) -> float | None:
    """Steps per second over the recent points, if they span any time."""
    if len(recent) < 2:
        return None
    span_steps = recent[0].step - recent[-1].step
    span_seconds = recent[0].ts - recent[-1].ts
    return span_steps / span_seconds if span_steps > 0 and span_seconds > 0 else None
