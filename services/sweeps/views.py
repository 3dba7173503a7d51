"""The API view of a sweep: its spec, trial counts, best trial, and (one sweep) its trials."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.models import Job, Sweep, SweepTrial
from services.statuses import JobStatus, SweepStatus
from services.sweeps.objective import best_of, objective_values
from services.sweeps.schemas import SweepCreate, SweepRead, TrialRead
from services.sweeps.store import is_stopped_early, read_trials, spec_of


def trial_counts(*, session: Session, sweeps: Sequence[Sweep]) -> dict[int, dict[str, int]]:
    """Sweep id -> {job status: trials in it} (one query)."""
    counts: dict[int, dict[str, int]] = {sweep.id: {} for sweep in sweeps}
    if not sweeps:
        return counts
    rows = session.execute(
        sa.select(Job.sweep_id, Job.status, sa.func.count())
        .where(Job.sweep_id.in_(list(counts)))
        .group_by(Job.sweep_id, Job.status)
    ).all()
    for sweep_id, status, count in rows:
        if sweep_id is not None:
            counts[sweep_id][str(status)] = count
    return counts


def _base(sweep: Sweep, spec: SweepCreate, counts: dict[str, int]) -> SweepRead:
    return SweepRead(
        id=sweep.id,
        project=sweep.project.name,
        name=sweep.name,
        status=sweep.status,
        reason=sweep.reason,
        template=dict(sweep.spec.get("template", {})),
        algorithm=spec.search_algorithm,
        space=dict(sweep.spec.get("space", {})),
        seed=sweep.seed if spec.space.random else None,
        objective=spec.objective,
        early_stopping=spec.early_stopping,
        max_concurrent=sweep.max_concurrent,
        trials_total=sweep.trials_total,
        trials_created=sweep.trials_created,
        trial_counts=counts,
        best_job_id=sweep.best_job_id,
        best_value=sweep.best_value,
        schedule_id=sweep.schedule_id,
        scheduled_for=sweep.scheduled_for,
        created_at=sweep.created_at,
        finished_at=sweep.finished_at,
    )


def to_list_read(*, session: Session, sweeps: Sequence[Sweep]) -> list[SweepRead]:
    """The views of a page of sweeps, without their trials."""
    counts = trial_counts(session=session, sweeps=sweeps)
    views = []
    for sweep in sweeps:
        view = _base(sweep, spec_of(sweep), counts[sweep.id])
        if sweep.best_job_id is not None and sweep.trials_created:
            view.best_parameters = _best_parameters(sweep, session)
        views.append(view)
    return views


def _best_parameters(sweep: Sweep, session: Session) -> dict[str, object]:
    parameters = session.execute(
        sa.select(SweepTrial.parameters)
        .join(
            Job,
            sa.and_(Job.sweep_id == SweepTrial.sweep_id, Job.trial_index == SweepTrial.trial_index),
        )
        .where(Job.id == sweep.best_job_id)
    ).scalar_one_or_none()
    return dict(parameters or {})


def _parameters(session: Session, sweep: Sweep) -> dict[int, dict[str, object]]:
    """Trial index -> the parameters its job got (one query)."""
    rows = session.execute(
        sa.select(SweepTrial.trial_index, SweepTrial.parameters).where(
            SweepTrial.sweep_id == sweep.id
        )
    )
    return {index: dict(parameters) for index, parameters in rows}


def to_read(*, session: Session, sweep: Sweep) -> SweepRead:
    """One sweep with every trial: parameters, status, objective value; the best so far."""
    spec = spec_of(sweep)
    trials = read_trials(session=session, sweep=sweep)
    counts: dict[str, int] = {}
    for job in trials:
        counts[str(job.status)] = counts.get(str(job.status), 0) + 1
    view = _base(sweep, spec, counts)
    values = objective_values(session=session, jobs=trials, objective=spec.objective)
    by_index = _parameters(session, sweep)
    params = {job.id: by_index.get(job.trial_index or 0, {}) for job in trials}
    view.trials = [
        TrialRead(
            index=job.trial_index or 0,
            job_id=job.id,
            name=job.name,
            status=job.status,
            reason=job.reason,
            attempt=job.attempt,
            parameters=params[job.id],
            objective_value=values.get(job.id),
            stopped_early=is_stopped_early(job),
            created_at=job.created_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
        )
        for job in trials
    ]
    if sweep.status is SweepStatus.RUNNING:  # the best so far, among succeeded trials
        best = best_of(
            values, (j.id for j in trials if j.status is JobStatus.SUCCEEDED), spec.objective.mode
        )
        view.best_job_id, view.best_value = best if best else (None, None)
    view.best_parameters = params.get(view.best_job_id) if view.best_job_id else None
    return view
