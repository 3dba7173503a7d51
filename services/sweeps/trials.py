"""A sweep's new trials: each one's parameters asked of the sweep's Optuna study
(services/sweeps/study.py), its job created like any other, and what Optuna chose stored
in its `SweepTrial` row, all in the pass's transaction.

Metrics reach SQL through a Redis stream, apart from the replicas' exits. A sampler that
learns from results (tpe, cmaes) asks no new trial until METRIC_SETTLE_SECONDS after the
last trial ended: it is told that trial's final value, not one still arriving (CMA-ES
keeps what it is told once a generation is full). random and grid learn nothing from
results and do not wait.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from functools import partial
from typing import TypeVar

from sqlalchemy.orm import Session

from services.exceptions import InvalidJobSpec, QuotaExceeded
from services.jobs import store as jobs
from services.models import Sweep
from services.settings import Settings
from services.sweeps.history import (
    TrialJob,
    read_history,
    read_rows,
    read_trial_jobs,
    store_trial,
)
from services.sweeps.schemas import SweepCreate
from services.sweeps.store import trial_job
from services.sweeps.study import SweepStudy

T = TypeVar("T")
METRIC_SETTLE_SECONDS = 3.0
LEARNING = ("tpe", "cmaes")  # the algorithms whose next trial depends on the results


def _settling(trials: list[TrialJob], now: dt.datetime) -> bool:
    """Whether a trial ended too recently for all its metrics to be in."""
    settle = dt.timedelta(seconds=METRIC_SETTLE_SECONDS)
    return any(job.ended_at is not None and now - job.ended_at < settle for job in trials)


def _optuna(call: Callable[[], T]) -> T:
    """`call()`, an error of Optuna's as the sweep's: nothing the checks let through
    should raise one; if it does, the sweep ends saying so and the pass goes on."""
    try:
        return call()
    except (ValueError, TypeError, ArithmeticError) as exc:
        raise InvalidJobSpec("space", f"Optuna could not draw its parameters: {exc}") from exc


def create_trials(
    *,
    session: Session,
    settings: Settings,
    sweep: Sweep,
    spec: SweepCreate,
    count: int,
    now: dt.datetime,
    created: list[int],
) -> QuotaExceeded | None:
    """Create up to `count` trials, each with the parameters its study asks; the project's
    queued-jobs quota may stop it early (returned: the trials behind wait for a later
    pass)."""
    trials = read_trial_jobs(session=session, sweep=sweep)
    if spec.search_algorithm in LEARNING and _settling(trials, now):
        return None
    rows = read_rows(session=session, sweep=sweep)
    history = read_history(
        session=session,
        spec=spec,
        jobs=trials,
        rows=rows,
        count=sweep.trials_created,
        # TPE ranks the trials a rule stopped by their last point; no other sampler reads
        # a point when asked.
        with_points=spec.early_stopping is not None and spec.search_algorithm == "tpe",
    )
    study = _optuna(
        lambda: SweepStudy(sweep_id=sweep.id, spec=spec, seed=sweep.seed, trials=history)
    )
    first = sweep.trials_created
    full: QuotaExceeded | None = None
    for index in range(first, first + count):
        fixed = rows[index].parameters if index in rows else None
        params, attrs = _optuna(partial(study.ask, index, fixed))
        try:
            job, _created = jobs.create_job(
                session=session,
                project_id=sweep.project_id,
                job_in=trial_job(spec, params, index),
                settings=settings,
                trial_of=(sweep.id, index),
            )
        except QuotaExceeded as exc:  # refused before anything was written
            full = exc
            break
        if sweep.schedule_env:  # a schedule's run: its trials are told its fire
            job.schedule_env = dict(sweep.schedule_env)
        store_trial(
            session=session,
            sweep=sweep,
            rows=rows,
            index=index,
            parameters=params,
            system_attrs=attrs,
        )
        created.append(job.id)
        sweep.trials_created = index + 1
    session.flush()
    return full
