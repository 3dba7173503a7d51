"""Early stopping: the sweep's rule, carried out by its Optuna pruner, judges each running
trial at its last reported step.

The study is rebuilt with every trial's objective points (services/sweeps/study.py), and
each running trial is asked `should_prune()`: MedianPruner (`median`),
SuccessiveHalvingPruner (`asha`) or HyperbandPruner (`hyperband`) decides. What a pruner
records on the way (the value each trial had at each rung it reached) is written back to
the trial's row, so the next judgement, in any scheduler, goes on from it.

A stopped trial is cancelled with the reason "stopped early: <rule> rule at step s ...":
it does not fail the sweep, is PRUNED to Optuna from then on, and is never the best.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy.orm import Session

from services.jobs import store as jobs
from services.models import Job, Sweep, SweepTrial
from services.statuses import JobStatus
from services.sweeps import study_cache
from services.sweeps.history import (
    HistoryRead,
    TrialJob,
    read_histories,
    read_rows,
    read_trial_jobs,
    store_trial,
)
from services.sweeps.schemas import SweepCreate
from services.sweeps.store import STOPPED_EARLY
from services.sweeps.study import StoredTrial, SweepStudy, make_pruner

log = logging.getLogger("cohort.sweeps")


@dataclass(frozen=True)
class Verdict:
    """Stop trial `job_id`: behind the others at `step`, its best value so far `best`."""

    job_id: int
    step: int
    best: float


def _reason(spec: SweepCreate, pruner: str, verdict: Verdict) -> str:
    assert spec.early_stopping is not None
    return (
        f"{STOPPED_EARLY}: {spec.early_stopping.rule} rule at step {verdict.step} (best "
        f"{spec.objective.metric} so far {verdict.best:.6g}; Optuna's {pruner})"
    )


def judge_running(*, session: Session, sweep: Sweep, spec: SweepCreate) -> list[Verdict]:
    """Judge the sweep's running trials; store what the pruner recorded; the verdicts."""
    trials = read_trial_jobs(session=session, sweeps=[sweep])[sweep.id]
    running = [job for job in trials if job.status is JobStatus.RUNNING]
    if not running:
        return []
    rows = read_rows(session=session, sweeps=[sweep])[sweep.id]
    read = HistoryRead(spec, trials, rows, sweep.trials_created, with_points=True)
    [history] = read_histories(session=session, reads=[read])
    study = study_cache.study_for(
        sweep_id=sweep.id, spec=spec, seed=sweep.seed, trials=history, with_points=True
    )
    try:
        return _judge(session, sweep, spec, study, running, history, rows)
    finally:
        study_cache.keep(study, with_points=True)


def _judge(
    session: Session,
    sweep: Sweep,
    spec: SweepCreate,
    study: SweepStudy,
    running: list[TrialJob],
    history: list[StoredTrial],
    rows: dict[int, SweepTrial],
) -> list[Verdict]:
    verdicts = []
    pick = max if spec.objective.mode == "max" else min
    for job in running:
        index = job.trial_index
        points = history[index].points
        if not points:
            continue
        stop = study.should_stop(index)
        attrs = study.system_attrs(index)
        if attrs != history[index].system_attrs:
            store_trial(
                session=session,
                sweep=sweep,
                rows=rows,
                index=index,
                parameters=history[index].parameters,
                system_attrs=attrs,
            )
        if stop:
            verdicts.append(Verdict(job.id, max(points), pick(points.values())))
    return verdicts


def stop_behind(*, session: Session, sweep: Sweep, spec: SweepCreate) -> list[int]:
    """Cancel the running trials the rule stops; their job ids."""
    try:
        verdicts = judge_running(session=session, sweep=sweep, spec=spec)
    except (ValueError, TypeError, ArithmeticError):
        # Nothing stored should make a pruner raise; if it does, the trials run on
        # unjudged and the pass goes on.
        log.exception("sweep %d: its rule could not judge its trials", sweep.id)
        return []
    pruner = type(make_pruner(spec.early_stopping)).__name__
    for verdict in verdicts:
        job = session.get(Job, verdict.job_id)
        assert job is not None
        jobs.request_cancel(session=session, job=job, reason=_reason(spec, pruner, verdict))
    return [verdict.job_id for verdict in verdicts]
