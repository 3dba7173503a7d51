"""Sweeps: create (checked up front: the algorithm against the space, the trials' jobs on
the points that bound them), read, list, cancel.

Trials are created later, by the scheduler pass (services/sweeps/advance.py).
Service functions only add and flush; the caller commits.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Protocol

import sqlalchemy as sa
from pydantic import ValidationError
from sqlalchemy.orm import Session

from services.db import newest_first_page
from services.exceptions import InvalidJobSpec, SweepEnded, SweepNotFound
from services.jobs import quotas
from services.jobs import store as jobs
from services.jobs.bundles import check_bundle
from services.jobs.inputs import check_inputs_exist
from services.jobs.quota_schemas import QuotaLimits
from services.jobs.schemas import JobCreate
from services.jobs.spec import stored_hyperparameters
from services.models import Job, Sweep, utcnow
from services.settings import Settings
from services.statuses import TERMINAL_STATUSES, TERMINAL_SWEEP_STATUSES, JobStatus, SweepStatus
from services.sweeps.objective import best_of, objective_values
from services.sweeps.schemas import Choice, SweepCreate
from services.sweeps.space import draw_seed, grid_size, probe_count, probe_points, trial_spec
from services.webhooks import payloads
from services.webhooks.outbox import emit

STOPPED_EARLY = "stopped early"  # the start of the reason of a trial the rule stopped
# Metrics reach SQL through a Redis stream, apart from the replicas' exits: what is read
# of a trial this long after it ended is all of it (services/sweeps/trials.py, advance.py).
METRIC_SETTLE_SECONDS = 3.0


class _Outcome(Protocol):
    @property
    def status(self) -> JobStatus: ...

    @property
    def reason(self) -> str: ...


def is_stopped_early(job: _Outcome) -> bool:
    """Whether the early-stopping rule cancelled this trial (a `Job`, or its columns)."""
    return job.status is JobStatus.CANCELLED and job.reason.startswith(STOPPED_EARLY)


def spec_of(sweep: Sweep) -> SweepCreate:
    """The stored spec, validated again (it was stored from a SweepCreate)."""
    return SweepCreate.model_validate(sweep.spec)


def trial_name(sweep_name: str, index: int) -> str:
    return f"{sweep_name}-t{index}"[:128]


def trial_job(spec: SweepCreate, params: dict[str, Any], index: int) -> JobCreate:
    """The job of trial `index` with `params` (ValidationError when they do not fit a job)."""
    return JobCreate.model_validate(
        trial_spec(
            spec.template.model_dump(mode="json", exclude_unset=True)
            | {"hyperparameters": stored_hyperparameters(spec.template)},
            params,
            trial_name(spec.name, index),
        )
    )


def _space_field(spec: SweepCreate, loc: tuple[Any, ...]) -> str:
    """The request field to blame for a trial job refused at `loc`."""
    kind = "grid" if spec.space.grid else "random"
    params = spec.space.grid or spec.space.random or {}
    for part in loc[:2]:
        if isinstance(part, str) and part in params:
            return f"space.{kind}.{part}"
    return "template." + ".".join(str(p) for p in loc) if loc else "space"


def _shown(params: dict[str, Any]) -> str:
    return ", ".join(f"{name}={value!r}" for name, value in params.items())


def _check_trials(spec: SweepCreate, settings: Settings, limits: QuotaLimits) -> None:
    """Check the job of every parameter set `probe_points` gives (services/sweeps/space.py)."""
    count = probe_count(spec.space)
    if count > settings.MAX_SWEEP_TRIALS:  # a grid's is its size, refused before
        # Each is a job checked while the request waits: as many as a sweep may have trials.
        raise InvalidJobSpec(
            "space.random",
            f"{count} values to check (every choice, each range's two ends), over the limit "
            f"of {settings.MAX_SWEEP_TRIALS} (COHORT_MAX_SWEEP_TRIALS); use fewer choices",
        )
    for params in probe_points(spec.space):
        try:
            job_in = trial_job(spec, params, 0)
        except ValidationError as exc:
            error = exc.errors()[0]
            field = _space_field(spec, tuple(error.get("loc", ())))
            raise InvalidJobSpec(
                field,
                f"a trial with {_shown(params)} is not a valid job: "
                f"{str(error['msg']).removeprefix('Value error, ')}",
            ) from exc
        try:
            jobs.check_job_spec(job_in=job_in, settings=settings)
            quotas.check_spec(job_in=job_in, limits=limits)
        except InvalidJobSpec as exc:
            raise exc.renamed(
                _space_field(spec, tuple(exc.field.split("."))),
                f"a trial with {_shown(params)}: {exc.message}",
            ) from exc


def _check_algorithm(sweep_in: SweepCreate) -> None:
    """The algorithm fits the space (the schema checks each apart)."""
    algorithm, space = sweep_in.search_algorithm, sweep_in.space
    if algorithm == "grid" and space.random:
        raise InvalidJobSpec(
            "algorithm",
            "grid runs every combination of `space.grid`; distributions (`space.random`) "
            "are sampled by random, tpe or cmaes",
        )
    if algorithm != "grid" and space.grid:
        raise InvalidJobSpec(
            "algorithm",
            f"{algorithm} samples distributions (`space.random`); the combinations of "
            "`space.grid` are run by `algorithm: grid`",
        )
    dists = space.random or {}
    if algorithm == "cmaes" and all(isinstance(d, Choice) for d in dists.values()):
        raise InvalidJobSpec(
            "algorithm",
            "cmaes searches numeric parameters (uniform, log_uniform, int) and this space "
            "has only choices, which it would leave to chance: use tpe or random",
        )


def _count_trials(sweep_in: SweepCreate, settings: Settings) -> int:
    if sweep_in.space.grid:
        total = grid_size(sweep_in.space)
        if total > settings.MAX_SWEEP_TRIALS:
            raise InvalidJobSpec(
                "space.grid",
                f"{total} combinations, over the limit of "
                f"{settings.MAX_SWEEP_TRIALS} trials "
                "(COHORT_MAX_SWEEP_TRIALS); try fewer values",
            )
        if sweep_in.trials is not None and sweep_in.trials != total:
            raise InvalidJobSpec(
                "trials", f"a grid runs one trial per combination ({total}); leave `trials` out"
            )
        return total
    total = sweep_in.trials or 0
    if total > settings.MAX_SWEEP_TRIALS:
        raise InvalidJobSpec(
            "trials",
            f"{total} trials, over the limit of "
            f"{settings.MAX_SWEEP_TRIALS} (COHORT_MAX_SWEEP_TRIALS)",
        )
    return total


def check_sweep(
    *, session: Session, project_id: int, sweep_in: SweepCreate, settings: Settings
) -> int:
    """Every check a sweep must pass before it is stored; returns its number of trials.

    Raises:
        InvalidJobSpec: naming the field (`algorithm`, `space.grid`, `trials`,
            `template.<field>`, ...).
    """
    _check_algorithm(sweep_in)
    total = _count_trials(sweep_in, settings)
    try:
        jobs.check_job_spec(job_in=sweep_in.template, settings=settings)
    except InvalidJobSpec as exc:
        raise exc.under("template.") from exc
    # Trials are jobs of the template's priority and size (or the space's): a sweep its
    # project's quota could never run is refused now, not trial by trial.
    limits = quotas.read_limits(session=session, project_id=project_id, settings=settings)
    quotas.check_spec(job_in=sweep_in.template, limits=limits, field_prefix="template.")
    check_bundle(session=session, project_id=project_id, digest=sweep_in.template.bundle)
    check_inputs_exist(project_id=project_id, inputs=sweep_in.template.inputs, settings=settings)
    _check_trials(sweep_in, settings, limits)
    return total


def create_sweep(
    *,
    session: Session,
    project_id: int,
    sweep_in: SweepCreate,
    settings: Settings,
    now: dt.datetime | None = None,
) -> Sweep:
    """Store a running sweep; the scheduler pass creates its trials.

    Raises:
        InvalidJobSpec, BundleNotFound, DataNotFound: the spec is refused.
    """
    total = check_sweep(
        session=session, project_id=project_id, sweep_in=sweep_in, settings=settings
    )
    seed = 0  # a grid's order is GridSampler's, the same for every grid of its shape
    if sweep_in.space.random:
        seed = sweep_in.space.seed if sweep_in.space.seed is not None else draw_seed()
    now = now or utcnow()
    sweep = Sweep(
        project_id=project_id,
        name=sweep_in.name,
        spec=sweep_in.model_dump(mode="json", exclude_unset=True),
        seed=seed,
        trials_total=total,
        trials_created=0,
        max_concurrent=sweep_in.max_concurrent,
        priority=sweep_in.template.priority,
        status=SweepStatus.RUNNING,
        stops_early=sweep_in.early_stopping is not None,
        reason=f"{total} trials, at most {sweep_in.max_concurrent} at once",
        created_at=now,
        updated_at=now,
    )
    session.add(sweep)
    session.flush()
    return sweep


def read_sweep(*, session: Session, project_id: int, sweep_id: int, lock: bool = False) -> Sweep:
    """A sweep of this project (another project's is 'not found')."""
    query = sa.select(Sweep).where(Sweep.id == sweep_id, Sweep.project_id == project_id)
    if lock:
        query = query.with_for_update(of=Sweep).execution_options(populate_existing=True)
    sweep = session.execute(query).scalar_one_or_none()
    if sweep is None:
        raise SweepNotFound(sweep_id)
    return sweep


def list_sweeps(
    *,
    session: Session,
    project_id: int,
    status: SweepStatus | None = None,
    before: int | None = None,
    limit: int = 50,
) -> tuple[list[Sweep], int | None]:
    """Newest first; returns the page and the id to continue below (or None)."""
    query = sa.select(Sweep).where(Sweep.project_id == project_id)
    if status is not None:
        query = query.where(Sweep.status == status)
    return newest_first_page(session, query, Sweep.id, before, limit)


def read_trials(*, session: Session, sweep: Sweep) -> list[Job]:
    """The sweep's trial jobs, by trial index."""
    return list(
        session.execute(
            sa.select(Job).where(Job.sweep_id == sweep.id).order_by(Job.trial_index)
        ).scalars()
    )


def record_best(*, session: Session, sweep: Sweep, trials: list[Job]) -> tuple[int, float] | None:
    """Set the sweep's best trial among its succeeded ones (None: none has a value)."""
    spec = spec_of(sweep)
    succeeded = [job for job in trials if job.status is JobStatus.SUCCEEDED]
    values = objective_values(session=session, jobs=succeeded, objective=spec.objective)
    best = best_of(values, (job.id for job in succeeded), spec.objective.mode)
    sweep.best_job_id, sweep.best_value = best if best else (None, None)
    return best


def cancel_sweep(
    *,
    session: Session,
    sweep: Sweep,
    reason: str = "cancelled by user",
    now: dt.datetime | None = None,
) -> Sweep:
    """Cancel a sweep and every trial not ended; the pass stops their replicas.

    Raises:
        SweepEnded: the sweep has already ended.
    """
    if sweep.status in TERMINAL_SWEEP_STATUSES:
        raise SweepEnded(sweep.id, sweep.status)
    trials = read_trials(session=session, sweep=sweep)
    for job in trials:
        if job.status not in TERMINAL_STATUSES:
            jobs.request_cancel(
                session=session, job=job, reason=f"sweep {sweep.id} cancelled: {reason}"
            )
    record_best(session=session, sweep=sweep, trials=trials)
    sweep.status, sweep.reason = SweepStatus.CANCELLED, reason
    sweep.finished_at = now or utcnow()
    session.flush()
    announce_end(session=session, sweep=sweep)
    return sweep


def announce_end(*, session: Session, sweep: Sweep) -> None:
    """The webhooks' `sweep.ended` of a sweep that has just ended, in the caller's
    transaction (services/webhooks/outbox.py)."""
    emit(
        session,
        project_id=sweep.project_id,
        event="sweep.ended",
        payload=payloads.sweep_payload(sweep),
    )
