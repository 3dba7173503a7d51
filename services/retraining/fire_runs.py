"""One fire time's run: its job (or sweep) created under the schedule's concurrency
policy, with its run record in the same savepoint, or a record of why none was made
(skipped, failed). The unique (schedule_id, scheduled_for) keys make a fire time that
another scheduler already handled come back as None.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from pydantic import ValidationError
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from services.exceptions import BundleNotFound, DataNotFound, InvalidJobSpec, QuotaExceeded
from services.jobs import store as jobs
from services.jobs.schemas import JobCreate
from services.models import Job, Schedule, ScheduleRun, Sweep
from services.retraining import promotion
from services.retraining.fire_env import Fire
from services.settings import Settings
from services.statuses import TERMINAL_STATUSES, SweepStatus
from services.sweeps import store as sweeps
from services.sweeps.schemas import SweepCreate
from services.webhooks import payloads
from services.webhooks.outbox import emit


def stamp(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _job_name(schedule: Schedule, fire_time: dt.datetime) -> str:
    return f"{schedule.name}-{fire_time.astimezone(dt.UTC):%Y%m%d-%H%M%S}"[:128]


def _active_jobs(session: Session, schedule: Schedule) -> list[Job]:
    return list(
        session.execute(
            sa.select(Job)
            .where(Job.schedule_id == schedule.id, Job.status.not_in(TERMINAL_STATUSES))
            .order_by(Job.id)
        ).scalars()
    )


def _run(
    schedule: Schedule,
    fire: Fire,
    outcome: str,
    reason: str,
    job: Job | None = None,
    sweep: Sweep | None = None,
) -> ScheduleRun:
    made = job is not None or sweep is not None
    return ScheduleRun(
        schedule_id=schedule.id,
        scheduled_for=fire.scheduled_for,
        data_version=fire.data_version,
        outcome=outcome,
        reason=reason,
        job_id=job.id if job else None,
        sweep_id=sweep.id if sweep else None,
        decision="pending" if made and schedule.promote_metric else None,
    )


def record(
    session: Session, schedule: Schedule, fire: Fire | dt.datetime, outcome: str, reason: str
) -> ScheduleRun | None:
    """Record a fire that made no job (skipped, missed, failed)."""
    fire = fire if isinstance(fire, Fire) else Fire(fire)
    run = _run(schedule, fire, outcome, reason + fire.note())
    try:
        with session.begin_nested():
            session.add(run)
            session.flush()
    except IntegrityError:
        return None  # this fire time is already recorded: someone else handled it
    schedule.last_outcome = outcome
    return run


def start_run(
    *,
    session: Session,
    settings: Settings,
    schedule: Schedule,
    fire: Fire,
    outcome: str = "fired",
) -> ScheduleRun | None:
    """Create the job (or sweep) of one fire of a locked schedule, under its
    concurrency policy.

    Returns the run record, or None when this fire (its time, or its data version) was
    already handled.
    """
    fire_time = fire.scheduled_for
    if schedule.sweep_template is not None:
        return _start_sweep(session, settings, schedule, fire, outcome)
    active = _active_jobs(session, schedule)
    if active and schedule.concurrency_policy == "forbid":
        return record(
            session,
            schedule,
            fire,
            "skipped",
            f"job {active[-1].id} of the previous run is still {active[-1].status} "
            "(concurrency_policy=forbid)",
        )
    try:
        template = JobCreate.model_validate(
            {**schedule.job_template, "name": _job_name(schedule, fire_time)}
        )
    except ValidationError as exc:  # stored under an older schema
        return record(
            session,
            schedule,
            fire,
            "failed",
            f"the stored job template is no longer valid ({exc.errors()[0]['msg']});"
            " update the schedule's job",
        )
    replacing = active if schedule.concurrency_policy == "replace" else []
    note = f"; replaced job {', '.join(str(o.id) for o in replacing)}" if replacing else ""
    run, job = _create_job(session, settings, schedule, fire, outcome, template, note)
    if job is None:
        return run
    for old in replacing:
        jobs.request_cancel(
            session=session,
            job=old,
            reason=f"replaced by job {job.id} of schedule {schedule.name!r} "
            "(concurrency_policy=replace)",
        )
    schedule.last_outcome = outcome
    schedule.last_fired_at = fire_time
    promotion.prune_history(session=session, schedule=schedule)
    _announce(session, schedule, run)
    return run


def _announce(session: Session, schedule: Schedule, run: ScheduleRun | None) -> None:
    """The webhooks' `schedule.fired` of a fire time that made a job or a sweep, in the
    transaction that made it (services/webhooks/outbox.py)."""
    if run is not None:
        emit(
            session,
            project_id=schedule.project_id,
            event="schedule.fired",
            payload=payloads.schedule_fired_payload(schedule, run),
        )


def _create_job(
    session: Session,
    settings: Settings,
    schedule: Schedule,
    fire: Fire,
    outcome: str,
    template: JobCreate,
    note: str,
) -> tuple[ScheduleRun | None, Job | None]:
    """The fire time's job and its run record, both or neither; without a job, the
    record of why (None: already fired)."""
    try:
        # One savepoint for the job and its run record: both or neither.
        with session.begin_nested():
            job, _ = jobs.create_job(
                session=session, project_id=schedule.project_id, job_in=template, settings=settings
            )
            job.schedule_id = schedule.id
            job.scheduled_for = fire.scheduled_for
            job.schedule_env = fire.env()
            run = _run(
                schedule,
                fire,
                outcome,
                f"job {job.id} created for {stamp(fire.scheduled_for)}{fire.note()}{note}",
                job,
            )
            session.add(run)
            session.flush()
    except IntegrityError:
        return None, None  # the unique (schedule_id, scheduled_for) keys: already fired
    except QuotaExceeded as exc:
        # Not the template's fault: this fire time is skipped, the next one may run.
        why = f"project quota: {exc.used} of {exc.allowed} queued jobs; this fire time made no job"
        return record(session, schedule, fire, "skipped", why), None
    except (InvalidJobSpec, BundleNotFound, DataNotFound) as exc:
        why = f"the job template is refused: {exc}; update the schedule's job"
        return record(session, schedule, fire, "failed", why), None
    return run, job


def _start_sweep(
    session: Session, settings: Settings, schedule: Schedule, fire: Fire, outcome: str
) -> ScheduleRun | None:
    """`start_run` for a schedule that fires a sweep: the same rules, a sweep for a job."""
    active = list(
        session.execute(
            sa.select(Sweep)
            .where(Sweep.schedule_id == schedule.id, Sweep.status == SweepStatus.RUNNING)
            .order_by(Sweep.id)
        ).scalars()
    )
    if active and schedule.concurrency_policy == "forbid":
        return record(
            session,
            schedule,
            fire,
            "skipped",
            f"sweep {active[-1].id} of the previous run is still running "
            "(concurrency_policy=forbid)",
        )
    run, sweep = _create_sweep(session, settings, schedule, fire, outcome)
    if sweep is None:
        return run
    if schedule.concurrency_policy == "replace":
        for old in active:
            sweeps.cancel_sweep(
                session=session,
                sweep=old,
                reason=f"replaced by sweep {sweep.id} of schedule "
                f"{schedule.name!r} (concurrency_policy=replace)",
            )
    schedule.last_outcome = outcome
    schedule.last_fired_at = fire.scheduled_for
    _announce(session, schedule, run)
    return run


def _create_sweep(
    session: Session, settings: Settings, schedule: Schedule, fire: Fire, outcome: str
) -> tuple[ScheduleRun | None, Sweep | None]:
    """The fire time's sweep and its run record, both or neither; without a sweep, the
    record of why (None: already fired)."""
    try:
        sweep_in = SweepCreate.model_validate(
            {
                **(schedule.sweep_template or {}),
                "name": _job_name(schedule, fire.scheduled_for)[:100],
            }
        )
        # One savepoint for the sweep and its run record: both or neither.
        with session.begin_nested():
            sweep = sweeps.create_sweep(
                session=session,
                project_id=schedule.project_id,
                sweep_in=sweep_in,
                settings=settings,
            )
            sweep.schedule_id, sweep.scheduled_for = schedule.id, fire.scheduled_for
            sweep.schedule_env = fire.env()
            run = _run(
                schedule,
                fire,
                outcome,
                f"sweep {sweep.id} created for {stamp(fire.scheduled_for)}{fire.note()}",
                sweep=sweep,
            )
            session.add(run)
            session.flush()
    except IntegrityError:
        return None, None  # the unique (schedule_id, scheduled_for) keys: already fired
    except (ValidationError, InvalidJobSpec, BundleNotFound, DataNotFound) as exc:
        why = f"the sweep template is refused: {exc}; update the schedule's sweep"
        return record(session, schedule, fire, "failed", why), None
    return run, sweep
