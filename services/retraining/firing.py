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

What one fire time creates, under the schedule's concurrency policy, is fire_runs.py's;
what it tells the run (the data interval it covers) fire_env.py's. Data triggers fire
in the same pass, by data_triggers.py, under the same two guards.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.models import Schedule, ScheduleRun, utcnow
from services.retraining import data_triggers
from services.retraining.fire_env import Fire
from services.retraining.fire_runs import record, stamp, start_run
from services.retraining.schedules import timing_of
from services.settings import Settings

MAX_PER_PASS = 100

log = logging.getLogger("cohort.schedules")


@dataclass
class FireResult:
    jobs: list[int] = field(default_factory=list)  # jobs created
    runs: list[ScheduleRun] = field(default_factory=list)  # every record written


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
        run = record(
            session,
            schedule,
            older,
            "missed",
            f"{total - 1} fire time(s) from {stamp(schedule.next_fire_at)} to "
            f"{stamp(older)} passed before a scheduler could fire them; only the latest "
            "one may still run",
        )
        result.runs += [run] if run else []
    late = (now - latest).total_seconds()
    deadline = schedule.starting_deadline_seconds
    if deadline is not None and late > deadline:
        run = record(
            session,
            schedule,
            latest,
            "missed",
            f"{late:.0f}s late, more than starting_deadline_seconds={deadline}",
        )
    else:
        # The interval runs from where the last run's ended: missed and skipped fire
        # times made no run, so this one covers theirs too.
        start = schedule.covered_until or schedule.created_at
        fire = Fire(latest, interval_start=start, interval_end=latest)
        run = start_run(session=session, settings=settings, schedule=schedule, fire=fire)
        if run is not None and run.job_id is not None:
            result.jobs.append(run.job_id)
        if run is not None and (run.job_id or run.sweep_id):
            schedule.covered_until = latest
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
    fired = data_triggers.fire_data_triggers(session=session, settings=settings, now=now)
    result.jobs += [run.job_id for run in fired if run.job_id is not None]
    result.runs += fired
    return result


def trigger_schedule(
    *, session: Session, settings: Settings, schedule: Schedule, now: dt.datetime | None = None
) -> ScheduleRun | None:
    """Run a schedule now (`POST /schedules/{id}/trigger`), under its concurrency policy."""
    return start_run(
        session=session,
        settings=settings,
        schedule=schedule,
        fire=Fire(now or utcnow()),
        outcome="triggered",
    )
