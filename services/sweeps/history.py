"""Sweeps' trials as their Optuna studies see them, read from the database (a few
queries, whatever the number of trials or of sweeps), and the trials' search state written back.

A trial's state for Optuna follows from its job:
- not ended (queued, scheduled, running, restarting): RUNNING (asked, not told yet);
- succeeded with a value of the objective: COMPLETE with that value;
- cancelled by the early-stopping rule: PRUNED;
- anything else (failed, cancelled, succeeded without the metric, a NaN, its job
  deleted): FAIL.
Its points are the objective metric's values of its current attempt on the objective's
replica, by step: Optuna's intermediate values (read only when a rule needs them).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, cast

import sqlalchemy as sa
from optuna.trial import TrialState
from sqlalchemy.orm import Session

from services.models import Job, MetricPoint, Sweep, SweepTrial
from services.statuses import TERMINAL_STATUSES, JobStatus
from services.sweeps.objective import Attempt, objective_values, of_attempts
from services.sweeps.schemas import Objective, SweepCreate
from services.sweeps.store import is_stopped_early
from services.sweeps.study import StoredTrial


@dataclass(frozen=True)
class TrialJob:
    """The columns of a trial's job that its state for Optuna needs."""

    id: int
    trial_index: int
    attempt: int
    status: JobStatus
    reason: str
    ended_at: dt.datetime | None  # None while not ended

    @property
    def stopped_early(self) -> bool:
        return is_stopped_early(self)


def read_trial_jobs(*, session: Session, sweeps: Sequence[Sweep]) -> dict[int, list[TrialJob]]:
    """Each sweep's trial jobs, by index (by sweep id, one query for them all): only the
    columns above (not whole jobs)."""
    found: dict[int, list[TrialJob]] = {sweep.id: [] for sweep in sweeps}
    if not found:
        return found
    rows = session.execute(
        sa.select(
            Job.sweep_id,
            Job.id,
            Job.trial_index,
            Job.attempt,
            Job.status,
            Job.reason,
            sa.func.coalesce(Job.finished_at, Job.updated_at),
        )
        .where(Job.sweep_id.in_(list(found)))
        .order_by(Job.sweep_id, Job.trial_index)
    )
    for sweep_id, job_id, index, attempt, status, reason, ended in rows:
        found[cast(int, sweep_id)].append(  # not NULL: the WHERE names it
            TrialJob(
                job_id,
                index or 0,
                attempt,
                status,
                reason,
                ended if status in TERMINAL_STATUSES else None,
            )
        )
    return found


def read_rows(*, session: Session, sweeps: Sequence[Sweep]) -> dict[int, dict[int, SweepTrial]]:
    """Each sweep's trial rows by index (created trials, and any whose parameters were
    fixed ahead), by sweep id: one query for them all."""
    found: dict[int, dict[int, SweepTrial]] = {sweep.id: {} for sweep in sweeps}
    if found:
        rows = session.execute(sa.select(SweepTrial).where(SweepTrial.sweep_id.in_(list(found))))
        for row in rows.scalars():
            found[row.sweep_id][row.trial_index] = row
    return found


class StoredRow(Protocol):
    """A trial's row as its history reads it: a `SweepTrial`, or its two columns."""

    @property
    def parameters(self) -> dict[str, Any]: ...

    @property
    def system_attrs(self) -> dict[str, Any]: ...


class RowColumns(NamedTuple):
    """A trial row's columns, read only (not a `SweepTrial`: see `read_created_rows`)."""

    parameters: dict[str, Any]
    system_attrs: dict[str, Any]


def read_created_rows(
    *, session: Session, sweeps: Sequence[Sweep]
) -> tuple[dict[int, dict[int, RowColumns]], dict[int, dict[int, SweepTrial]]]:
    """Each sweep's trial rows by index as their columns, and, as `SweepTrial`s for
    `store_trial` to write, those of trials not created yet (parameters fixed ahead):
    both by sweep id, in one query (two if a row was fixed ahead).

    A created trial's row is only read when trials are created: 1,100 of them (100
    sweeps of 11 trials) cost ~10 ms as ORM objects, ~6 ms as columns."""
    found: dict[int, dict[int, RowColumns]] = {sweep.id: {} for sweep in sweeps}
    ahead: dict[int, dict[int, SweepTrial]] = {sweep.id: {} for sweep in sweeps}
    if not found:
        return found, ahead
    created = {sweep.id: sweep.trials_created for sweep in sweeps}
    rows = session.execute(
        sa.select(
            SweepTrial.sweep_id,
            SweepTrial.trial_index,
            SweepTrial.parameters,
            SweepTrial.system_attrs,
        ).where(SweepTrial.sweep_id.in_(list(found)))
    )
    for sweep_id, index, parameters, system_attrs in rows:
        found[sweep_id][index] = RowColumns(parameters, system_attrs)
    fixed = [s for s, by_index in found.items() if any(i >= created[s] for i in by_index)]
    if fixed:
        ahead_rows = session.execute(
            sa.select(SweepTrial).where(
                sa.or_(
                    *(
                        sa.and_(SweepTrial.sweep_id == s, SweepTrial.trial_index >= created[s])
                        for s in fixed
                    )
                )
            )
        ).scalars()
        for row in ahead_rows:
            ahead[row.sweep_id][row.trial_index] = row
    return found, ahead


def objective_points(
    *, session: Session, jobs: Sequence[Attempt], objective: Objective
) -> dict[int, dict[int, float]]:
    """Job id -> {step: value} of the objective metric (current attempt, one query)."""
    if not jobs:
        return {}
    query = sa.select(MetricPoint.job_id, MetricPoint.step, MetricPoint.value)
    rows = session.execute(
        of_attempts(session, query, jobs).where(
            MetricPoint.replica == objective.replica, MetricPoint.name == objective.metric
        )
    )
    points: dict[int, dict[int, float]] = {job.id: {} for job in jobs}
    for job_id, step, value in rows:
        if value is not None and not math.isnan(value):
            points[job_id][step] = float(value)
    return points


def _state(job: TrialJob, value: float | None) -> TrialState:
    if job.status not in TERMINAL_STATUSES:
        return TrialState.RUNNING
    if job.status is JobStatus.SUCCEEDED and value is not None and not math.isnan(value):
        return TrialState.COMPLETE
    return TrialState.PRUNED if job.stopped_early else TrialState.FAIL


@dataclass(frozen=True)
class HistoryRead:
    """What a sweep's history is built from: its spec, its trials' jobs and rows, the
    number of trials created, and whether the objective's points are wanted."""

    spec: SweepCreate
    jobs: Sequence[TrialJob]
    rows: Mapping[int, StoredRow]
    count: int
    with_points: bool


def read_histories(*, session: Session, reads: Sequence[HistoryRead]) -> list[list[StoredTrial]]:
    """Each sweep's `count` trials, by index, for its study: the objective's values (and
    points) read once for every sweep with the same objective, not once a sweep."""
    groups: dict[str, list[HistoryRead]] = {}
    for read in reads:
        groups.setdefault(read.spec.objective.model_dump_json(), []).append(read)
    values: dict[int, float] = {}  # by job id: unique across sweeps
    points: dict[int, dict[int, float]] = {}
    for members in groups.values():
        objective = members[0].spec.objective
        succeeded = [j for r in members for j in r.jobs if j.status is JobStatus.SUCCEEDED]
        values.update(objective_values(session=session, jobs=succeeded, objective=objective))
        pointed = [job for read in members if read.with_points for job in read.jobs]
        points.update(objective_points(session=session, jobs=pointed, objective=objective))
    return [_history(read, values, points) for read in reads]


def _history(
    read: HistoryRead, values: dict[int, float], points: dict[int, dict[int, float]]
) -> list[StoredTrial]:
    by_index = {job.trial_index: job for job in read.jobs}
    trials = []
    # Every index up to the last, so a trial's number in the study is its index: a trial
    # whose job is gone (deleted) is a failed one.
    for index in range(max(read.count, max(by_index, default=-1) + 1)):
        row, job = read.rows.get(index), by_index.get(index)
        value = values.get(job.id) if job else None
        state = _state(job, value) if job else TrialState.FAIL
        trials.append(
            StoredTrial(
                index=index,
                parameters=dict(row.parameters) if row else {},
                system_attrs=dict(row.system_attrs) if row else {},
                state=state,
                value=value if state is TrialState.COMPLETE else None,
                points=points.get(job.id, {}) if job else {},
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
