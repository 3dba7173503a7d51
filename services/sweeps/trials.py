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
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from pydantic import ValidationError
from sqlalchemy.orm import Session

from services.exceptions import BundleNotFound, DataNotFound, InvalidJobSpec, QuotaExceeded
from services.jobs import store as jobs
from services.jobs.admission import Admitted, Submission
from services.models import Sweep, SweepTrial
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
    asked, refused = _ask_and_check(session, settings, sweep, spec, study, rows, count)
    full = _admit(session, settings, sweep, rows, asked, created)
    session.flush()
    if full is None and refused is not None:
        raise refused  # the trials before it are created, as one at a time would leave them
    return full


@dataclass(frozen=True)
class _Asked:
    """A trial asked of the study and checked, waiting for admission."""

    index: int
    parameters: dict[str, Any]
    system_attrs: dict[str, Any]
    submission: Submission


def _ask_and_check(
    session: Session,
    settings: Settings,
    sweep: Sweep,
    spec: SweepCreate,
    study: SweepStudy,
    rows: dict[int, SweepTrial],
    count: int,
) -> tuple[list[_Asked], Exception | None]:
    """Trials asked and their jobs checked, in order, up to the first that a check refuses
    (returned with the error: its trial and those after it are not created)."""
    asked: list[_Asked] = []
    first = sweep.trials_created
    for index in range(first, first + count):
        fixed = rows[index].parameters if index in rows else None
        try:
            params, attrs = _optuna(partial(study.ask, index, fixed))
            job_in = trial_job(spec, params, index)
            lines = jobs.check_submission(
                session=session, project_id=sweep.project_id, job_in=job_in, settings=settings
            )
        except (InvalidJobSpec, BundleNotFound, DataNotFound, ValidationError) as exc:
            return asked, exc
        submission = Submission(sweep.project_id, job_in, None, (sweep.id, index), tuple(lines))
        asked.append(_Asked(index, params, attrs, submission))
    return asked, None


def _admit(
    session: Session,
    settings: Settings,
    sweep: Sweep,
    rows: dict[int, SweepTrial],
    asked: list[_Asked],
    created: list[int],
) -> QuotaExceeded | None:
    """Admit the asked trials' jobs in one batch (one quota read, one insert round: not a
    round of each per trial) and store their rows; the quota's refusal that stopped them,
    if one did. As one at a time would, the first refusal ends the pass's trials."""
    submissions = [a.submission for a in asked]
    if len(submissions) == 1:  # nothing behind a refusal to undo: no savepoint
        outcomes = jobs.admit_submissions(
            session=session, settings=settings, submissions=submissions
        )
    else:
        outcomes = _admit_in_order(session, settings, submissions)
    for trial, outcome in zip(asked, outcomes, strict=False):
        if isinstance(outcome, QuotaExceeded):  # refused before anything was written
            return outcome
        if isinstance(outcome, Exception):
            raise outcome
        job = outcome.job
        if sweep.schedule_env:  # a schedule's run: its trials are told its fire
            job.schedule_env = dict(sweep.schedule_env)
        store_trial(
            session=session,
            sweep=sweep,
            rows=rows,
            index=trial.index,
            parameters=trial.parameters,
            system_attrs=trial.system_attrs,
        )
        created.append(job.id)
        sweep.trials_created = trial.index + 1
    return None


def _admit_in_order(
    session: Session, settings: Settings, submissions: list[Submission]
) -> list[Admitted | Exception]:
    """Outcomes up to and with the first refusal, the jobs before it admitted: what
    admitting them one at a time and stopping at a refusal leaves. (A later trial can be
    admitted past a refusal: its gang fits a quota an earlier one's did not. That batch is
    undone and the trials before the refusal admitted again.)"""
    with session.begin_nested() as batch:
        outcomes = jobs.admit_submissions(
            session=session, settings=settings, submissions=submissions
        )
        stop = next((i for i, o in enumerate(outcomes) if isinstance(o, Exception)), None)
        if stop is None or not any(isinstance(o, Admitted) for o in outcomes[stop:]):
            return outcomes
        batch.rollback()
    again = jobs.admit_submissions(
        session=session, settings=settings, submissions=submissions[:stop]
    )
    return [*again, outcomes[stop]]
