"""Retraining schedules: create, read, list, update, pause/resume, delete.

Firing lives in services/retraining/firing.py, promotion decisions in
services/retraining/promotion.py, the promoted model's read in promoted.py.
Service functions only add and flush; the caller commits.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from services.exceptions import (
    InvalidJobSpec,
    ScheduleConflict,
    ScheduleNotFound,
)
from services.jobs import quotas
from services.jobs.bundles import check_bundle
from services.jobs.inputs import check_inputs_exist
from services.jobs.schemas import JobCreate
from services.jobs.spec import stored_hyperparameters
from services.jobs.store import check_job_spec
from services.models import Schedule, ScheduleRun, utcnow
from services.registry.names import DEFAULT_ALIAS
from services.retraining import data_triggers, evaluation
from services.retraining.cron import Timing
from services.retraining.read_schemas import ScheduleRead
from services.retraining.schemas import Evaluate, Promotion, ScheduleCreate, ScheduleUpdate
from services.settings import Settings
from services.sweeps.schemas import SweepCreate
from services.sweeps.store import check_sweep


def _check_template(
    job_in: JobCreate, settings: Settings, session: Session, project_id: int
) -> None:
    try:
        check_job_spec(job_in=job_in, settings=settings)
        quotas.check_template(
            session=session,
            project_id=project_id,
            job_in=job_in,
            settings=settings,
            field_prefix="",
        )
    except InvalidJobSpec as exc:
        raise exc.under("job.") from exc
    # A template names its bundle by digest, so every run reuses one upload.
    check_bundle(session=session, project_id=project_id, digest=job_in.bundle)
    check_inputs_exist(project_id=project_id, inputs=job_in.inputs, settings=settings)


def _check_sweep_template(
    sweep_in: SweepCreate, settings: Settings, session: Session, project_id: int
) -> None:
    try:
        check_sweep(
            session=session,
            project_id=project_id,
            sweep_in=sweep_in,
            settings=settings,
        )
    except InvalidJobSpec as exc:
        raise exc.under("sweep.") from exc


def _set_template(
    schedule: Schedule, job_in: JobCreate | None, sweep_in: SweepCreate | None
) -> None:
    """A schedule fires a job or a sweep: set one template, clear the other."""
    schedule.job_template = (
        {**job_in.model_dump(mode="json"), "hyperparameters": stored_hyperparameters(job_in)}
        if job_in
        else {}
    )
    schedule.sweep_template = (
        sweep_in.model_dump(mode="json", exclude_unset=True) if sweep_in else None
    )


def timing_of(schedule: Schedule) -> Timing:
    """When `schedule` fires; intervals count from its creation."""
    return Timing(
        cron=schedule.cron,
        interval_seconds=schedule.interval_seconds,
        timezone=schedule.timezone,
        anchor=schedule.created_at,
    )


def _set_promotion(schedule: Schedule, promote: Promotion | None) -> None:
    schedule.promote_metric = promote.metric if promote else None
    schedule.promote_mode = promote.mode if promote else "max"
    schedule.promote_model = promote.model if promote else None
    schedule.promote_alias = promote.alias if promote else None


def create_schedule(
    *,
    session: Session,
    project_id: int,
    schedule_in: ScheduleCreate,
    settings: Settings,
    now: dt.datetime | None = None,
) -> Schedule:
    """Store a schedule; its first fire time is the first one after now.

    Raises:
        InvalidJobSpec: a setting refuses the job template (the same checks as a submit).
        BeyondQuota: the project's quota never permits the template's job (a subclass).
        QuotaExceeded: the project has as many schedules as its quota allows.
        ScheduleConflict: the project already has a schedule of that name.
    """
    now = now or utcnow()
    if schedule_in.job is not None:
        job_in = data_triggers.checkable(schedule_in.job, schedule_in)
        _check_template(job_in, settings, session, project_id)
    if schedule_in.sweep is not None:
        _check_sweep_template(schedule_in.sweep, settings, session, project_id)
    evaluation.check_evaluate(
        evaluate=schedule_in.evaluate, job_in=schedule_in.job, project_id=project_id,
        session=session, settings=settings,
    )  # fmt: skip
    quotas.admit_schedule(session=session, project_id=project_id, settings=settings)
    schedule = Schedule(
        project_id=project_id,
        name=schedule_in.name,
        cron=schedule_in.cron,
        interval_seconds=schedule_in.interval_seconds,
        timezone=schedule_in.timezone,
        concurrency_policy=schedule_in.concurrency_policy,
        starting_deadline_seconds=schedule_in.starting_deadline_seconds,
        successful_jobs_history_limit=schedule_in.successful_jobs_history_limit,
        failed_jobs_history_limit=schedule_in.failed_jobs_history_limit,
        paused=schedule_in.paused,
        last_outcome="",
        created_at=now,
        updated_at=now,
    )
    _set_template(schedule, schedule_in.job, schedule_in.sweep)
    _set_promotion(schedule, schedule_in.promote)
    evaluation.apply(schedule, schedule_in.evaluate)
    schedule.next_fire_at = timing_of(schedule).first_after(now)
    data_triggers.set_trigger(session, settings, schedule, schedule_in.trigger)
    try:
        # A savepoint: a duplicate name must leave the caller's transaction usable.
        with session.begin_nested():
            session.add(schedule)
            session.flush()
    except IntegrityError as exc:
        raise ScheduleConflict(
            "name",
            f"a schedule named {schedule_in.name!r} exists; pick another name or update that one",
        ) from exc
    return schedule


def read_schedule(
    *, session: Session, project_id: int, schedule_id: int, lock: bool = False
) -> Schedule:
    """A schedule of this project (another project's is 'not found')."""
    query = sa.select(Schedule).where(Schedule.id == schedule_id, Schedule.project_id == project_id)
    if lock:
        query = query.with_for_update(of=Schedule).execution_options(populate_existing=True)
    schedule = session.execute(query).scalar_one_or_none()
    if schedule is None:
        raise ScheduleNotFound(schedule_id)
    return schedule


def list_schedules(*, session: Session, project_id: int) -> list[Schedule]:
    """The project's schedules, by name."""
    return list(
        session.execute(
            sa.select(Schedule).where(Schedule.project_id == project_id).order_by(Schedule.name)
        ).scalars()
    )


def update_schedule(
    *,
    session: Session,
    schedule: Schedule,
    schedule_in: ScheduleUpdate,
    settings: Settings,
    now: dt.datetime | None = None,
) -> Schedule:
    """Replace the fields given; a new timing takes effect from now."""
    now = now or utcnow()
    given = schedule_in.model_fields_set
    if "job" in given and schedule_in.job is not None:
        job_in = data_triggers.checkable(schedule_in.job, schedule_in, schedule.trigger_path)
        _check_template(job_in, settings, session, schedule.project_id)
        _set_template(schedule, schedule_in.job, None)
    if "sweep" in given and schedule_in.sweep is not None:
        _check_sweep_template(schedule_in.sweep, settings, session, schedule.project_id)
        _set_template(schedule, None, schedule_in.sweep)
    if schedule_in.cron is not None:
        schedule.cron, schedule.interval_seconds = schedule_in.cron, None
    if schedule_in.interval_seconds is not None:
        schedule.cron, schedule.interval_seconds = None, schedule_in.interval_seconds
        schedule.created_at = now  # a new interval counts from now
    for name in ("timezone", "concurrency_policy"):
        if getattr(schedule_in, name) is not None:
            setattr(schedule, name, getattr(schedule_in, name))
    # These may be set back to "none" with an explicit null.
    for name in (
        "starting_deadline_seconds",
        "successful_jobs_history_limit",
        "failed_jobs_history_limit",
    ):
        if name in given:
            setattr(schedule, name, getattr(schedule_in, name))
    if "promote" in given:
        _set_promotion(schedule, schedule_in.promote)
    if given & {"evaluate", "job", "sweep", "promote"}:  # an evaluation sets the promotion
        _update_evaluate(session, schedule, schedule_in, settings)
    data_triggers.update_trigger(session, settings, schedule, schedule_in)
    if given & {"cron", "interval_seconds", "timezone"} and not schedule.paused:
        schedule.next_fire_at = timing_of(schedule).first_after(now)
    schedule.updated_at = now
    session.flush()
    return schedule


def _update_evaluate(
    session: Session, schedule: Schedule, schedule_in: ScheduleUpdate, settings: Settings
) -> None:
    """A new evaluate block, or the stored one checked again against a new template."""
    given = schedule_in.model_fields_set
    stored = Evaluate.model_validate(schedule.evaluate) if schedule.evaluate else None
    evaluate = schedule_in.evaluate if "evaluate" in given else stored
    job_in = JobCreate.model_validate(schedule.job_template) if schedule.job_template else None
    evaluation.check_evaluate(
        evaluate=evaluate, job_in=job_in, project_id=schedule.project_id,
        session=session, settings=settings,
    )  # fmt: skip
    evaluation.apply(schedule, evaluate)


def pause_schedule(*, session: Session, schedule: Schedule) -> Schedule:
    """Stop firing; runs due while paused are not made up later."""
    schedule.paused = True
    schedule.next_fire_at = None
    session.flush()
    return schedule


def resume_schedule(
    *, session: Session, schedule: Schedule, now: dt.datetime | None = None
) -> Schedule:
    """Fire again from the first fire time after now."""
    if schedule.paused:
        schedule.paused = False
        schedule.next_fire_at = timing_of(schedule).first_after(now or utcnow())
        session.flush()
    return schedule


def delete_schedule(*, session: Session, schedule: Schedule) -> None:
    """Delete a schedule and its run records; its jobs stay (their schedule_id becomes null)."""
    session.delete(schedule)
    session.flush()


def read_runs(*, session: Session, schedule: Schedule, limit: int = 20) -> list[ScheduleRun]:
    """The schedule's most recent run records, newest first."""
    return list(
        session.execute(
            sa.select(ScheduleRun)
            .where(ScheduleRun.schedule_id == schedule.id)
            .order_by(ScheduleRun.scheduled_for.desc(), ScheduleRun.id.desc())
            .limit(limit)
        ).scalars()
    )


def to_read(*, session: Session, schedule: Schedule, runs: int = 20) -> ScheduleRead:
    """The API view of a schedule, with its recent runs."""
    promote = (
        Promotion(
            metric=schedule.promote_metric,
            mode=schedule.promote_mode,  # type: ignore[arg-type]
            model=schedule.promote_model,
            alias=schedule.promote_alias or DEFAULT_ALIAS,
        )
        if schedule.promote_metric
        else None
    )
    return ScheduleRead(
        id=schedule.id,
        project=schedule.project.name,
        name=schedule.name,
        job=dict(schedule.job_template),
        sweep=schedule.sweep_template,
        cron=schedule.cron,
        interval_seconds=schedule.interval_seconds,
        timezone=schedule.timezone,
        concurrency_policy=schedule.concurrency_policy,
        starting_deadline_seconds=schedule.starting_deadline_seconds,
        successful_jobs_history_limit=schedule.successful_jobs_history_limit,
        failed_jobs_history_limit=schedule.failed_jobs_history_limit,
        promote=promote,
        evaluate=Evaluate.model_validate(schedule.evaluate) if schedule.evaluate else None,
        **data_triggers.view(schedule),
        paused=schedule.paused,
        next_fire_at=schedule.next_fire_at,
        last_fired_at=schedule.last_fired_at,
        last_outcome=schedule.last_outcome,
        promoted_job_id=schedule.promoted_job_id,
        promoted_value=schedule.promoted_value,
        created_at=schedule.created_at,
        recent_runs=evaluation.run_reads(
            session=session, runs=read_runs(session=session, schedule=schedule, limit=runs)
        ),
    )
