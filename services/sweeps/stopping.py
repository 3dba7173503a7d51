"""The median stopping rule: stop a running trial that is clearly behind the others.

The rule (Golovin et al., "Google Vizier", 2017; Ray Tune's MedianStoppingRule),
in this exact form. For a running trial T whose objective metric has reached step
s >= `min_steps` (its highest stored step, current attempt, objective replica):

- T's score is its best value of the metric up to s (max or min, per the mode);
- every other trial of the sweep (whatever its status, stopped ones included) that
  has reported the metric at some step >= s contributes its running average: the
  mean of its values at steps <= s;
- with at least `min_trials` such trials, T is stopped when its score is strictly
  worse than the median of those running averages.

A stopped trial is cancelled with the reason "stopped early: median rule at step s
...": it does not fail the sweep, and is never its best.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.models import Job, MetricPoint, Sweep
from services.sweeps.objective import is_better
from services.sweeps.schemas import EarlyStopping, Objective


@dataclass(frozen=True)
class Verdict:
    """Stop trial `job_id`: at `step` its best is behind the others' median."""

    job_id: int
    step: int
    best: float
    median: float
    others: int


def median_verdict(
    *, best: float, averages: list[float], rule: EarlyStopping, mode: str
) -> float | None:
    """The median T is behind (None: keep T running)."""
    if len(averages) < rule.min_trials:
        return None
    median = statistics.median(averages)
    return median if is_better(median, best, mode) else None


def _objective_points(objective: Objective) -> tuple[sa.ColumnElement[bool], ...]:
    return (MetricPoint.replica == objective.replica, MetricPoint.name == objective.metric)


def find_trials_to_stop(
    *, session: Session, sweep: Sweep, running: list[Job], objective: Objective, rule: EarlyStopping
) -> list[Verdict]:
    """The running trials of `sweep` the median rule stops now."""
    if not running:
        return []
    pick = sa.func.max if objective.mode == "max" else sa.func.min
    progress = session.execute(
        sa.select(MetricPoint.job_id, sa.func.max(MetricPoint.step), pick(MetricPoint.value))
        .where(
            sa.tuple_(MetricPoint.job_id, MetricPoint.attempt).in_(
                [(job.id, job.attempt) for job in running]
            ),
            *_objective_points(objective),
        )
        .group_by(MetricPoint.job_id)
    ).all()
    verdicts = []
    for job_id, step, best in progress:
        if step is None or step < rule.min_steps:
            continue
        upto = sa.case((MetricPoint.step <= step, MetricPoint.value))
        others = session.execute(
            sa.select(sa.func.avg(upto), sa.func.max(MetricPoint.step))
            .join(Job, sa.and_(Job.id == MetricPoint.job_id, Job.attempt == MetricPoint.attempt))
            .where(Job.sweep_id == sweep.id, Job.id != job_id, *_objective_points(objective))
            .group_by(MetricPoint.job_id)
        ).all()
        averages = [float(avg) for avg, reached in others if avg is not None and reached >= step]
        median = median_verdict(best=float(best), averages=averages, rule=rule, mode=objective.mode)
        if median is not None:
            verdicts.append(Verdict(job_id, int(step), float(best), median, len(averages)))
    return verdicts
