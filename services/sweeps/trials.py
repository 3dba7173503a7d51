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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar, cast

from pydantic import ValidationError
from sqlalchemy.orm import Session

from services.exceptions import BundleNotFound, DataNotFound, InvalidJobSpec, QuotaExceeded
from services.jobs import store as jobs
from services.jobs.admission import Admitted, Submission
from services.models import Sweep, SweepTrial
from services.settings import Settings
from services.sweeps import study_cache
from services.sweeps.history import (
    HistoryRead,
    RowColumns,
    TrialJob,
    read_created_rows,
    read_histories,
    read_trial_jobs,
    store_trial,
)
from services.sweeps.schemas import SweepCreate
from services.sweeps.store import METRIC_SETTLE_SECONDS, trial_job
from services.sweeps.study import SweepStudy

T = TypeVar("T")
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


@dataclass(frozen=True)
class TrialsWanted:
    """A sweep the pass has locked, its spec, and how many trials it may create now."""

    sweep: Sweep
    spec: SweepCreate
    count: int


# What stops a sweep's trials in a pass: a check's or Optuna's refusal, or the project's
# quota (QuotaExceeded: the trials behind wait for a later pass).
REFUSALS = (InvalidJobSpec, BundleNotFound, DataNotFound, ValidationError, QuotaExceeded)


def create_trials(
    *,
    session: Session,
    settings: Settings,
    wanted: Sequence[TrialsWanted],
    now: dt.datetime,
    created: list[int],
) -> dict[int, Exception]:
    """Create up to each sweep's count of trials, each with the parameters its study asks.
    The sweeps' reads, and their jobs' admission, are done once for all of them: a pass
    in which 100 sweeps each create a trial reads and admits once, not 100 times.

    Returns, by sweep id, what stopped a sweep's trials (one of REFUSALS): a QuotaExceeded
    leaves the trials behind to a later pass; a refusal fails the sweep, the trials
    before it created, as one at a time would leave them."""
    jobs_of = read_trial_jobs(session=session, sweeps=[w.sweep for w in wanted])
    ready = [
        w
        for w in wanted
        if not (w.spec.search_algorithm in LEARNING and _settling(jobs_of[w.sweep.id], now))
    ]
    rows_of, ahead_of = read_created_rows(session=session, sweeps=[w.sweep for w in ready])
    reads = [_read(w, jobs_of, rows_of) for w in ready]
    histories = read_histories(session=session, reads=reads)
    stopped: dict[int, Exception] = {}
    batches: list[_Batch] = []
    for want, read, history in zip(ready, reads, histories, strict=True):
        sweep, rows = want.sweep, ahead_of[want.sweep.id]
        try:
            study = _optuna(
                partial(
                    study_cache.study_for,
                    sweep_id=sweep.id,
                    spec=want.spec,
                    seed=sweep.seed,
                    trials=history,
                    with_points=read.with_points,
                )
            )
        except InvalidJobSpec as exc:
            stopped[sweep.id] = exc
            continue
        try:
            asked, refused = _ask_and_check(session, settings, want, study, rows)
        finally:
            study_cache.keep(study, with_points=read.with_points)
        if refused is not None:
            stopped[sweep.id] = refused
        batches.append(_Batch(sweep, rows, asked))
    # A refusal met in admission comes before any check's (those trials were not asked
    # to be admitted): it is the one that stopped the sweep's trials.
    stopped.update(_admit(session, settings, batches, created))
    # Not flushed here: the pass's flush, once the sweeps' reasons are set too, writes
    # each sweep's row in one UPDATE (two had each sweep written twice: ~3 ms for 100).
    return stopped


def _read(
    want: TrialsWanted,
    jobs_of: dict[int, list[TrialJob]],
    rows_of: dict[int, dict[int, RowColumns]],
) -> HistoryRead:
    spec = want.spec
    return HistoryRead(
        spec,
        jobs_of[want.sweep.id],
        rows_of[want.sweep.id],
        want.sweep.trials_created,
        # TPE ranks the trials a rule stopped by their last point; no other sampler reads
        # a point when asked.
        with_points=spec.early_stopping is not None and spec.search_algorithm == "tpe",
    )


@dataclass(frozen=True)
class _Asked:
    """A trial asked of the study and checked, waiting for admission."""

    index: int
    parameters: dict[str, Any]
    system_attrs: dict[str, Any]
    submission: Submission


@dataclass(frozen=True)
class _Batch:
    """A sweep's trials of this pass, asked and checked, and its rows of trials not
    created yet (parameters fixed ahead)."""

    sweep: Sweep
    rows: dict[int, SweepTrial]
    asked: list[_Asked]


def _ask_and_check(
    session: Session,
    settings: Settings,
    want: TrialsWanted,
    study: SweepStudy,
    rows: dict[int, SweepTrial],
) -> tuple[list[_Asked], Exception | None]:
    """Trials asked and their jobs checked, in order, up to the first that a check refuses
    (returned with the error: its trial and those after it are not created)."""
    asked: list[_Asked] = []
    sweep, spec = want.sweep, want.spec
    first = sweep.trials_created
    for index in range(first, first + want.count):
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
    session: Session, settings: Settings, batches: list[_Batch], created: list[int]
) -> dict[int, Exception]:
    """Admit every sweep's asked trials in one batch (one quota read and one insert round
    a project: not a round of each per trial, nor per sweep) and store their rows; by
    sweep id, the refusal that stopped its trials, if one did. As one at a time would, a
    sweep's first refusal ends its trials of the pass."""
    outcomes = _admit_in_order(
        session, settings, [[a.submission for a in b.asked] for b in batches]
    )
    stopped: dict[int, Exception] = {}
    for batch, results in zip(batches, outcomes, strict=True):
        sweep = batch.sweep
        for trial, outcome in zip(batch.asked, results, strict=False):
            if isinstance(outcome, REFUSALS):  # refused before anything was written
                stopped[sweep.id] = outcome
                break
            if isinstance(outcome, Exception):
                raise outcome
            job = outcome.job
            if sweep.schedule_env:  # a schedule's run: its trials are told its fire
                job.schedule_env = dict(sweep.schedule_env)
            store_trial(
                session=session,
                sweep=sweep,
                rows=batch.rows,
                index=trial.index,
                parameters=trial.parameters,
                system_attrs=trial.system_attrs,
            )
            created.append(job.id)
            sweep.trials_created = trial.index + 1
    return stopped


def _admit_in_order(
    session: Session, settings: Settings, groups: list[list[Submission]]
) -> list[list[Admitted | Exception]]:
    """Each group's outcomes up to and with its first refusal, the jobs before it
    admitted: what admitting the groups one after the other, each one at a time and
    stopping at its refusal, leaves.

    A later submission of a group can be admitted past its refusal (its gang fits a quota
    an earlier one's did not). Then the batch is undone, that group cut at its refusal,
    and the batch admitted again: the groups before it had their final outcomes, the
    groups after it are counted again without its cut submissions. Each try cuts a new
    group (a cut only lowers the counts, so what was admitted stays admitted)."""
    cuts: dict[int, tuple[int, Exception]] = {}  # group -> kept submissions, its refusal
    while True:
        kept = [g[: cuts[i][0]] if i in cuts else g for i, g in enumerate(groups)]
        flat = [submission for group in kept for submission in group]
        # No group of more than one: nothing behind a refusal to undo, no savepoint.
        savepoint = session.begin_nested() if any(len(g) > 1 for g in kept) else None
        results = iter(jobs.admit_submissions(session=session, settings=settings, submissions=flat))
        slices = [[next(results) for _ in group] for group in kept]
        cut = next((i for i, s in enumerate(slices) if _admitted_past_refusal(s)), None)
        if cut is None:
            if savepoint is not None:
                savepoint.commit()
            return [s + [cuts[i][1]] if i in cuts else s for i, s in enumerate(slices)]
        assert savepoint is not None  # only a group of two or more can have one
        savepoint.rollback()
        stop = cast(int, _first_refusal(slices[cut]))
        cuts[cut] = (stop, cast(Exception, slices[cut][stop]))


def _first_refusal(outcomes: list[Admitted | Exception]) -> int | None:
    return next((i for i, o in enumerate(outcomes) if isinstance(o, Exception)), None)


def _admitted_past_refusal(outcomes: list[Admitted | Exception]) -> bool:
    stop = _first_refusal(outcomes)
    return stop is not None and any(isinstance(o, Admitted) for o in outcomes[stop:])
