"""A sweep's trials as its Optuna study sees them, read from the database (a few
queries, whatever the number of trials), and the trials' search state written back.

A trial's state for Optuna follows from its job:
- not ended (queued, scheduled, running, restarting): RUNNING (asked, not told yet);
- succeeded with a value of the objective: COMPLETE with that value;
- cancelled by the early-stopping rule: PRUNED;
- anything else (failed, cancelled, succeeded without the metric, a NaN): FAIL.
Its points are the objective metric's values of its current attempt on the objective's
replica, by step: Optuna's intermediate values (read only when a rule needs them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from optuna.trial import TrialState
from sqlalchemy.orm import Session

from services.models import Job, MetricPoint, Sweep, SweepTrial
from services.statuses import TERMINAL_STATUSES, JobStatus
from services.sweeps.objective import objective_values
from services.sweeps.schemas import Objective, SweepCreate
from services.sweeps.store import is_stopped_early
from services.sweeps.study import StoredTrial


def read_rows(*, session: Session, sweep: Sweep) -> dict[int, SweepTrial]:
    """The sweep's trial rows by index (created trials, and any whose parameters were
    fixed ahead)."""
    rows = session.execute(sa.select(SweepTrial).where(SweepTrial.sweep_id == sweep.id))
    return {row.trial_index: row for row in rows.scalars()}


def objective_points(
    *, session: Session, jobs: Sequence[Job], objective: Objective
) -> dict[int, dict[int, float]]:
    """Job id -> {step: value} of the objective metric (current attempt, one query)."""
    if not jobs:
        return {}
    rows = session.execute(
        sa.select(MetricPoint.job_id, MetricPoint.step, MetricPoint.value).where(
            sa.tuple_(MetricPoint.job_id, MetricPoint.attempt).in_(
                [(job.id, job.attempt) for job in jobs]
            ),
            MetricPoint.replica == objective.replica,
            MetricPoint.name == objective.metric,
        )
    )
    points: dict[int, dict[int, float]] = {job.id: {} for job in jobs}
    for job_id, step, value in rows:
        if value is not None and not math.isnan(value):
            points[job_id][step] = float(value)
    return points


def _state(job: Job, value: float | None) -> TrialState:
    if job.status not in TERMINAL_STATUSES:
        return TrialState.RUNNING
    if job.status is JobStatus.SUCCEEDED and value is not None and not math.isnan(value):
        return TrialState.COMPLETE
    return TrialState.PRUNED if is_stopped_early(job) else TrialState.FAIL


def read_history(
    *,
    session: Session,
    spec: SweepCreate,
    jobs: Sequence[Job],
    rows: dict[int, SweepTrial],
    with_points: bool,
) -> list[StoredTrial]:
    """The sweep's trials, by index, for its study (`jobs`: every trial job, by index)."""
    succeeded = [job for job in jobs if job.status is JobStatus.SUCCEEDED]
    values = objective_values(session=session, jobs=succeeded, objective=spec.objective)
    points = (
        objective_points(session=session, jobs=jobs, objective=spec.objective)
        if with_points
        else {}
    )
    trials = []
    for job in jobs:
        index = job.trial_index or 0
        row = rows.get(index)
        value = values.get(job.id)
        state = _state(job, value)
        trials.append(
            StoredTrial(
                index=index,
                parameters=dict(row.parameters) if row else {},
                system_attrs=dict(row.system_attrs) if row else {},
                state=state,
                value=value if state is TrialState.COMPLETE else None,
                points=points.get(job.id, {}),
            )
        )
    return trials


def store_trial(
    *,
    session: Session,
    sweep: Sweep,
    rows: dict[int, SweepTrial],
    index: int,
    parameters: dict[str, Any],
    system_attrs: dict[str, Any],
) -> None:
    """Write trial `index`'s parameters and Optuna system attributes (added or updated)."""
    row = rows.get(index)
    if row is None:
        row = SweepTrial(sweep_id=sweep.id, trial_index=index)
        session.add(row)
        rows[index] = row
    row.parameters, row.system_attrs = parameters, system_attrs
