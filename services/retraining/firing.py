"""Firing schedules: each due fire time creates one job, exactly once, under the concurrency rules.

Exactly once is structural, not a property of leadership: a fired job carries
`(schedule_id, scheduled_for)` under a unique key, the schedule row is locked
while it fires, and its `next_fire_at` moves on in the same transaction as the
job insert. Two schedulers (or an old leader still finishing a pass) that reach
the same fire time either skip the locked row or lose on the unique key.

Quotas: a fire time whose job the project's queued-jobs quota refuses is recorded
`skipped` with the reason (the next one may run); a template its quota never permits
(priority, gang size) is recorded `failed`, as any refused template.

Missed runs (a scheduler down for an hour) follow Kubernetes CronJob: only the
most recent missed fire time may run; the older ones are recorded as one
`missed` record, not fired in a burst. The most recent one runs if it is at
most `starting_deadline_seconds` late (any lateness when unset), otherwise it
is recorded as `missed` too.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field

import sqlalchemy as sa
from pydantic import ValidationError
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from services.exceptions import BundleNotFound, DataNotFound, InvalidJobSpec, QuotaExceeded
from services.jobs import store as jobs
from services.jobs.schemas import JobCreate
from services.models import Job, Schedule, ScheduleRun, Sweep, utcnow
from services.retraining import promotion
from services.retraining.schedules import timing_of
from services.settings import Settings
from services.statuses import TERMINAL_STATUSES, SweepStatus
from services.sweeps import store as sweeps
from services.sweeps.schemas import SweepCreate

MAX_PER_PASS = 100

log = logging.getLogger("cohort.schedules")


@dataclass
class FireResult:
    jobs: list[int] = field(default_factory=list)  # jobs created
    runs: list[ScheduleRun] = field(default_factory=list)  # every record written


def _stamp(moment: dt.datetime) -> str:
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
    fire_time: dt.datetime,
    outcome: str,
    reason: str,
    job: Job | None = None,
    sweep: Sweep | None = None,
) -> ScheduleRun:
    made = job is not None or sweep is not None
    return ScheduleRun(
        schedule_id=schedule.id,
        scheduled_for=fire_time,
        outcome=outcome,
        reason=reason,
        job_id=job.id if job else None,
        sweep_id=sweep.id if sweep else None,
        decision="pending" if made and schedule.promote_metric else None,
    )


def _record(
    session: Session, schedule: Schedule, fire_time: dt.datetime, outcome: str, reason: str
) -> ScheduleRun | None:
    """Record a fire time that made no job (skipped, missed, failed)."""
    run = _run(schedule, fire_time, outcome, reason)
    try:
        with session.begin_nested():
            session.add(run)
            session.flush()
    except IntegrityError:
        return None  # this fire time is already recorded: someone else handled it
    schedule.last_outcome = outcome
    return run


def _start_sweep(
    session: Session, settings: Settings, schedule: Schedule, fire_time: dt.datetime, outcome: str
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
        return _record(
            session,
            schedule,
            fire_time,
            "skipped",
            f"sweep {active[-1].id} of the previous run is still running "
            "(concurrency_policy=forbid)",
        )
    try:
        sweep_in = SweepCreate.model_validate(
            {**(schedule.sweep_template or {}), "name": _job_name(schedule, fire_time)[:100]}
        )
        # One savepoint for the sweep and its run record: both or neither.
        with session.begin_nested():
            sweep = sweeps.create_sweep(
                session=session,
                project_id=schedule.project_id,
                sweep_in=sweep_in,
                settings=settings,
            )
            sweep.schedule_id, sweep.scheduled_for = schedule.id, fire_time
            run = _run(
                schedule,
                fire_time,
                outcome,
                f"sweep {sweep.id} created for {_stamp(fire_time)}",
                sweep=sweep,
            )
            session.add(run)
            session.flush()
    except IntegrityError:
        return None  # the unique (schedule_id, scheduled_for) keys: already fired
    except (ValidationError, InvalidJobSpec, BundleNotFound, DataNotFound) as exc:
        return _record(
            session,
            schedule,
            fire_time,
            "failed",
            f"the sweep template is refused: {exc}; update the schedule's sweep",
        )
    if schedule.concurrency_policy == "replace":
        for old in active:
            sweeps.cancel_sweep(
                session=session,
                sweep=old,
                reason=f"replaced by sweep {sweep.id} of schedule "
                f"{schedule.name!r} (concurrency_policy=replace)",
            )
    schedule.last_outcome = outcome
    schedule.last_fired_at = fire_time
    return run


def start_run(
    *,
    session: Session,
    settings: Settings,
    schedule: Schedule,
    fire_time: dt.datetime,
    outcome: str = "fired",
) -> ScheduleRun | None:
    """Create the job (or sweep) of one fire time of a locked schedule, under its
    concurrency policy.

    Returns the run record, or None when this fire time was already handled.
    """
    if schedule.sweep_template is not None:
        return _start_sweep(session, settings, schedule, fire_time, outcome)
    active = _active_jobs(session, schedule)
    if active and schedule.concurrency_policy == "forbid":
        return _record(
            session,
            schedule,
            fire_time,
            "skipped",
            f"job {active[-1].id} of the previous run is still {active[-1].status} "
            "(concurrency_policy=forbid)",
        )
    try:
        template = JobCreate.model_validate(
            {**schedule.job_template, "name": _job_name(schedule, fire_time)}
        )
    except ValidationError as exc:  # stored under an older schema
        return _record(
            session,
            schedule,
            fire_time,
            "failed",
            f"the stored job template is no longer valid ({exc.errors()[0]['msg']});"
            " update the schedule's job",
        )
    replacing = active if schedule.concurrency_policy == "replace" else []
    note = f"; replaced job {', '.join(str(o.id) for o in replacing)}" if replacing else ""
    try:
        # One savepoint for the job and its run record: both or neither.
        with session.begin_nested():
            job, _ = jobs.create_job(
                session=session, project_id=schedule.project_id, job_in=template, settings=settings
            )
            job.schedule_id = schedule.id
            job.scheduled_for = fire_time
            run = _run(
                schedule,
                fire_time,
                outcome,
                f"job {job.id} created for {_stamp(fire_time)}{note}",
                job,
            )
            session.add(run)
            session.flush()
    except IntegrityError:
        return None  # the unique (schedule_id, scheduled_for) keys: already fired
    except QuotaExceeded as exc:
        # Not the template's fault: this fire time is skipped, the next one may run.
        return _record(
            session,
            schedule,
            fire_time,
            "skipped",
            f"project quota: {exc.used} of {exc.allowed} queued jobs; this fire time made no job",
        )
    except (InvalidJobSpec, BundleNotFound, DataNotFound) as exc:
        return _record(
            session,
            schedule,
            fire_time,
            "failed",
            f"the job template is refused: {exc}; update the schedule's job",
        )
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
    return run


def fire_schedule(
    *, session: Session, settings: Settings, schedule: Schedule, now: dt.datetime
) -> FireResult:
    """Handle every fire time of a locked schedule that is due at `now`."""
    result = FireResult()
    if schedule.paused or schedule.next_fire_at is None or schedule.next_fire_at > now:
        return result
    timing = timing_of(schedule)
    due, total = timing.due_between(schedule.next_fire_at, now)
    latest = due[-1]
    if total > 1:
        older = due[-2]
        run = _record(
            session,
            schedule,
            older,
            "missed",
            f"{total - 1} fire time(s) from {_stamp(schedule.next_fire_at)} to "
            f"{_stamp(older)} passed before a scheduler could fire them; only the latest "
            "one may still run",
        )
        result.runs += [run] if run else []
    late = (now - latest).total_seconds()
    deadline = schedule.starting_deadline_seconds
    if deadline is not None and late > deadline:
        run = _record(
            session,
            schedule,
            latest,
            "missed",
            f"{late:.0f}s late, more than starting_deadline_seconds={deadline}",
        )
    else:
        run = start_run(session=session, settings=settings, schedule=schedule, fire_time=latest)
        if run is not None and run.job_id is not None:
            result.jobs.append(run.job_id)
    result.runs += [run] if run else []
    schedule.next_fire_at = timing.next_after(now)
    session.flush()
    return result


def fire_due_schedules(
    *, session: Session, settings: Settings, now: dt.datetime | None = None
) -> FireResult:
    """Fire every schedule due at `now`; the caller commits (once, for all of them)."""
    now = now or utcnow()
    # SKIP LOCKED: a schedule another scheduler is firing right now is its business;
    # the re-read under the lock (populate_existing) sees a next_fire_at already moved on.
    due = (
        session.execute(
            sa.select(Schedule)
            .where(Schedule.paused.is_(False), Schedule.next_fire_at <= now)
            .order_by(Schedule.next_fire_at)
            .limit(MAX_PER_PASS)
            .with_for_update(of=Schedule, skip_locked=True)
            .execution_options(populate_existing=True)
        )
        .scalars()
        .all()
    )
    result = FireResult()
    for schedule in due:
        try:
            # One schedule's trouble must not stop the others, nor the placement pass.
            with session.begin_nested():
                one = fire_schedule(session=session, settings=settings, schedule=schedule, now=now)
        except Exception:
            log.exception("schedule %s could not fire", schedule.id)
            continue
        result.jobs += one.jobs
        result.runs += one.runs
    return result


def trigger_schedule(
    *, session: Session, settings: Settings, schedule: Schedule, now: dt.datetime | None = None
) -> ScheduleRun | None:
    """Run a schedule now (`POST /schedules/{id}/trigger`), under its concurrency policy."""
    return start_run(
        session=session,
        settings=settings,
        schedule=schedule,
        fire_time=now or utcnow(),
        outcome="triggered",
    )
