"""The sweeps' part of a scheduler pass: create trials in turn (their parameters asked
of the sweep's Optuna study), stop the ones its rule stops, and end the sweeps whose
trials have all ended.

Cheap by construction: it reads the running sweeps (an index on status) with their
trial counts in one query (see `_running_sweeps`), and reads a sweep's spec,
metrics or trials, and builds its study, only when there is something to do for it (a
trial to create, a sweep to end, or, every STOPPING_INTERVAL_SECONDS, running trials to
judge).

Capacity rules:
- never more than `max_concurrent` trials of a sweep are unfinished (a trial is
  created only when the count is below it);
- a trial is a job like any other: its project's queued-jobs quota may hold it back
  (the sweep says so and tries again next pass), and the placer applies the running
  quotas and fair sharing to it;
- a sweep creates no new trial while a job of higher priority waits in the queue
  (trials already queued keep their place: the placer orders by priority, and a
  blocked job's capacity is held for it, so they never jump ahead of it).
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy import orm
from sqlalchemy.orm import Session

from services.exceptions import QuotaExceeded
from services.models import Job, Sweep, utcnow
from services.settings import Settings
from services.statuses import TERMINAL_STATUSES, JobStatus, SweepStatus
from services.sweeps.schemas import SweepCreate
from services.sweeps.store import (
    METRIC_SETTLE_SECONDS,
    announce_end,
    is_stopped_early,
    read_trials,
    record_best,
    spec_of,
)

# Optuna (the studies of stopping.py and trials.py) is loaded by the first pass with a
# sweep to act on, not at the scheduler's start: 0.16 CPU-s of every start (numpy with
# it; docs/benchmarks.md, 2026-11-30) that a cluster running no sweep never needs.
if TYPE_CHECKING:
    from services.sweeps.trials import TrialsWanted

# A sweep picks its best METRIC_SETTLE_SECONDS after its last trial ended, so the last
# points are in (services/sweeps/trials.py says why); when no succeeded trial has the
# objective metric, it waits up to the grace first.
METRIC_GRACE_SECONDS = 60.0
# The stopping rule looks at a sweep's running trials at most this often: it reads their
# metrics, and a trial clearly behind stays behind for a few seconds more.
STOPPING_INTERVAL_SECONDS = 5.0

log = logging.getLogger("cohort.sweeps")


@dataclass
class SweepsResult:
    created: list[int] = field(default_factory=list)  # trial jobs created
    stopped: list[int] = field(default_factory=list)  # trial jobs stopped early
    ended: list[int] = field(default_factory=list)  # sweeps that ended


@dataclass
class _Counts:
    unfinished: int = 0  # trials not ended; once all are created, 1 stands for "some"
    running: bool = False  # some trial is running


def _running_sweeps(session: Session) -> list[tuple[Sweep, _Counts]]:
    """The running sweeps (without their spec) and their trial counts, in one or two
    queries.

    A sweep with every trial created only needs to know whether some trial is unfinished
    and whether some runs: EXISTS, one index probe however many trials are queued. The
    exact count of unfinished trials (at most max_concurrent each) is read, grouped, only
    for the sweeps still creating trials. (One query with a count subquery per sweep is
    costed so high that PostgreSQL compiles it with JIT: 30 ms spent on a 1 ms query.)"""
    unfinished = sa.exists().where(Job.sweep_id == Sweep.id, Job.status.not_in(TERMINAL_STATUSES))
    running = sa.exists().where(Job.sweep_id == Sweep.id, Job.status == JobStatus.RUNNING)
    rows = session.execute(
        sa.select(Sweep, unfinished, running)
        .where(Sweep.status == SweepStatus.RUNNING)
        .order_by(Sweep.id)
        # The spec is read only for the sweeps acted on (`_lock` loads it).
        .options(orm.defer(Sweep.spec), orm.lazyload(Sweep.project))
    ).all()
    creating = [
        sweep.id for sweep, some, _ in rows if some and sweep.trials_created < sweep.trials_total
    ]
    counts: dict[int | None, int] = {}
    if creating:
        counts = dict(
            session.execute(
                sa.select(Job.sweep_id, sa.func.count())
                .where(Job.sweep_id.in_(creating), Job.status.not_in(TERMINAL_STATUSES))
                .group_by(Job.sweep_id)
            ).all()
        )
    return [
        (sweep, _Counts(counts.get(sweep.id, int(bool(some))), bool(busy)))
        for sweep, some, busy in rows
    ]


def _waiting_priority(session: Session) -> int | None:
    """The highest priority of a queued job the cluster could place (None: none queued)."""
    # The placer marks a job that fits on no cluster "unschedulable: ..."; it blocks nobody.
    return session.execute(
        sa.select(sa.func.max(Job.priority)).where(
            Job.status == JobStatus.QUEUED, Job.reason.not_like("unschedulable%")
        )
    ).scalar_one_or_none()


def _summary(trials: list[Job]) -> str:
    stopped = sum(1 for j in trials if is_stopped_early(j))
    parts = [
        f"{sum(1 for j in trials if j.status is status)} {status}"
        for status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)
    ]
    return ", ".join(parts) + (f" ({stopped} stopped early)" if stopped else "")


def _end(
    sweep: Sweep, status: SweepStatus, reason: str, now: dt.datetime, result: SweepsResult
) -> None:
    sweep.status, sweep.reason, sweep.finished_at = status, reason, now
    result.ended.append(sweep.id)
    session = orm.object_session(sweep)
    assert session is not None  # the pass's sweeps are its session's rows
    announce_end(session=session, sweep=sweep)


def _try_to_end(
    session: Session, sweep: Sweep, spec: SweepCreate, now: dt.datetime, result: SweepsResult
) -> None:
    """End a sweep whose every trial has ended, once their metrics are in."""
    trials = read_trials(session=session, sweep=sweep)
    last_end = max((j.finished_at or j.updated_at for j in trials), default=now)
    quiet = (now - last_end).total_seconds()
    if quiet < METRIC_SETTLE_SECONDS:
        return
    if not any(j.status is JobStatus.SUCCEEDED for j in trials):
        _end(sweep, SweepStatus.FAILED, f"no trial succeeded: {_summary(trials)}", now, result)
        return
    best = record_best(session=session, sweep=sweep, trials=trials)
    objective = spec.objective
    if best is None:
        if quiet < METRIC_GRACE_SECONDS:
            return
        _end(
            sweep,
            SweepStatus.FAILED,
            f"no trial reported the objective metric {objective.metric!r} on replica "
            f"{objective.replica} ({_summary(trials)}): check objective.metric against the "
            "metrics the trainer reports",
            now,
            result,
        )
        return
    job_id, value = best
    index = next(j.trial_index for j in trials if j.id == job_id)
    _end(
        sweep,
        SweepStatus.SUCCEEDED,
        f"best: trial {index} (job {job_id}), {objective.metric}={value:.6g} "
        f"({objective.value}, {objective.mode}); {_summary(trials)}",
        now,
        result,
    )


def _stopping_due(sweep: Sweep, counts: _Counts, now: dt.datetime) -> bool:
    if not counts.running or not sweep.stops_early:
        return False
    last = sweep.stopping_checked_at
    return last is None or not last <= now < last + dt.timedelta(seconds=STOPPING_INTERVAL_SECONDS)


def _free_turns(sweep: Sweep, unfinished: int) -> int:
    return max(0, min(sweep.max_concurrent - unfinished, sweep.trials_total - sweep.trials_created))


def _lock(session: Session, sweeps: list[Sweep]) -> None:
    """Lock the sweeps the pass will change, in one statement, and read them again with
    their specs (a sweep that ended meanwhile, a cancel, is no longer RUNNING)."""
    # Only the sweeps acted on are locked (a row lock is a write in PostgreSQL); a cancel
    # locks its sweep too, so it never interleaves with a trial being created. In the
    # order of their ids, as every pass locks them: two never wait for each other.
    if sweeps:
        session.execute(
            sa.select(Sweep)
            .where(Sweep.id.in_([sweep.id for sweep in sweeps]))
            .order_by(Sweep.id)
            .with_for_update(of=Sweep)
            .options(orm.undefer(Sweep.spec), orm.lazyload(Sweep.project))
            .execution_options(populate_existing=True)
        ).scalars().all()  # fetched: the rows are refreshed (populate_existing) as they are read


class _Queue:
    """The highest priority waiting in the queue, read once a pass and only if asked."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.read = False
        self.value: int | None = None

    def blocks(self, sweep: Sweep) -> int | None:
        """The priority of a waiting job that keeps `sweep` from adding trials, if any."""
        if not self.read:
            self.value, self.read = _waiting_priority(self.session), True
        return self.value if self.value is not None and self.value > sweep.priority else None


@dataclass(frozen=True)
class _Plan:
    """What the pass may do for a sweep, decided from its counts before it is locked."""

    sweep: Sweep
    unfinished: int
    stopping: bool
    ending: bool
    blocked_by: int | None


def _blocked_note(priority: int) -> str:
    return f"waiting: a job of priority {priority} is queued ahead of new trials"


def _plan(sweep: Sweep, counts: _Counts, queue: _Queue, now: dt.datetime) -> _Plan | None:
    """The sweep's plan, or None when the pass has nothing to do for it."""
    stopping = _stopping_due(sweep, counts, now)
    to_create = _free_turns(sweep, counts.unfinished)
    ending = sweep.trials_created >= sweep.trials_total and counts.unfinished == 0
    blocked_by = queue.blocks(sweep) if to_create else None
    if blocked_by is not None and not stopping and sweep.reason == _blocked_note(blocked_by):
        return None  # still blocked, already said so
    if not (ending or to_create or stopping):
        return None  # the common case: trials running or queued, nothing to decide
    return _Plan(sweep, counts.unfinished, stopping, ending, blocked_by)


def _act(
    session: Session, plan: _Plan, now: dt.datetime, result: SweepsResult
) -> TrialsWanted | None:
    """Stop, say blocked, or end a locked sweep; the trials it may create, if any."""
    sweep = plan.sweep
    if sweep.status is not SweepStatus.RUNNING:
        return None  # it ended meanwhile (a cancel)
    from services.sweeps.stopping import stop_behind
    from services.sweeps.trials import TrialsWanted

    spec = spec_of(sweep)
    unfinished = plan.unfinished
    if plan.stopping:
        sweep.stopping_checked_at = now
        stopped = stop_behind(session=session, sweep=sweep, spec=spec)
        result.stopped.extend(stopped)
        unfinished -= len(stopped)
    to_create = _free_turns(sweep, unfinished)
    if to_create and plan.blocked_by is not None:
        sweep.reason = _blocked_note(plan.blocked_by)
    elif to_create:
        return TrialsWanted(sweep, spec, to_create)
    elif plan.ending:
        _try_to_end(session, sweep, spec, now, result)
    return None


def _created(
    wanted: list[TrialsWanted],
    stopped: dict[int, Exception],
    now: dt.datetime,
    result: SweepsResult,
) -> None:
    """Say what each sweep's trials came to; end a sweep whose trial was refused."""
    for want in wanted:
        sweep, stop = want.sweep, stopped.get(want.sweep.id)
        if stop is not None and not isinstance(stop, QuotaExceeded):
            # A setting or a quota changed, or the bundle/data went away, since the
            # sweep was checked.
            reason = f"trial {sweep.trials_created} was refused: {stop}"
            _end(sweep, SweepStatus.FAILED, reason, now, result)
            continue
        sweep.reason = (
            f"{sweep.trials_created} of {sweep.trials_total} trials created, "
            f"at most {sweep.max_concurrent} at once"
        )
        if isinstance(stop, QuotaExceeded):
            sweep.reason += f"; waiting: project quota: {stop.used} of {stop.allowed} queued jobs"


def advance_sweeps(
    *, session: Session, settings: Settings, now: dt.datetime | None = None
) -> SweepsResult:
    """One pass over the running sweeps; the caller commits."""
    now = now or utcnow()
    result = SweepsResult()
    queue = _Queue(session)
    plans = [
        plan
        for sweep, counts in _running_sweeps(session)
        if (plan := _plan(sweep, counts, queue, now)) is not None
    ]
    _lock(session, [plan.sweep for plan in plans])
    wanted = [want for plan in plans if (want := _act(session, plan, now, result)) is not None]
    if wanted:
        from services.sweeps.trials import create_trials

        stopped = create_trials(
            session=session, settings=settings, wanted=wanted, now=now, created=result.created
        )
        _created(wanted, stopped, now, result)
    if result.created or result.stopped or result.ended:
        session.flush()
    return result
