"""A job's progress: current epoch and step of the total, percent done, and an ETA.

Computed from the stored `step_time` points of replica 0 (the chief) of the current
attempt: every built-in trainer's callback reports one per step, so the newest of
them is the current step and the recent ones give the step rate.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.jobs.schemas import JobProgress
from services.models import Job, MetricPoint
from services.statuses import JobStatus

RATE_WINDOW = 50  # steps the rate is measured over: recent enough to follow a slowdown


def read_progress(*, session: Session, job: Job) -> JobProgress:
    """Where `job` is: step and epoch of the total, percent, steps/s and ETA (seconds)."""
    hp = job.hyperparameters or {}
    epochs = int(hp.get("epochs") or 1)
    steps_per_epoch = int(hp.get("steps_per_epoch") or 1)
    total = epochs * steps_per_epoch
    recent = session.execute(
        sa.select(MetricPoint.step, MetricPoint.ts)
        .where(
            MetricPoint.job_id == job.id,
            MetricPoint.attempt == job.attempt,
            MetricPoint.replica == 0,
            MetricPoint.name == "step_time",
        )
        .order_by(MetricPoint.step.desc())
        .limit(RATE_WINDOW)
    ).all()
    step = min(total, int(recent[0].step)) if recent else 0
    if job.status == JobStatus.SUCCEEDED:
        step = total
    rate = None
    if len(recent) >= 2:
        span_steps = recent[0].step - recent[-1].step
        span_seconds = recent[0].ts - recent[-1].ts
        if span_steps > 0 and span_seconds > 0:
            rate = span_steps / span_seconds
    eta = None
    if job.status == JobStatus.SUCCEEDED:
        eta = 0.0
    elif rate and job.status == JobStatus.RUNNING:
        eta = round((total - step) / rate, 1)
    return JobProgress(
        step=step,
        total_steps=total,
        epoch=min(epochs, (step - 1) // steps_per_epoch + 1) if step else 0,
        epochs=epochs,
        percent=round(100.0 * step / total, 1),
        steps_per_second=round(rate, 3) if rate else None,
        eta_seconds=eta,
    )
