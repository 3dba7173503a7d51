"""Promotion of scheduled runs' models, and the job history limits of schedules.

When a job a schedule fired has ended, its run record gets a decision: the new
model is `promoted` only if its metric (replica 0, last value of the current
attempt) beats the schedule's promoted one (strictly: a tie keeps the old
model); otherwise `kept`, `no_metric` or `not_eligible` (the job did not succeed).

A judged run's model (promoted or kept) is registered as the next version of the
schedule's model, and a promoted one's gets the schedule's alias (services/registry/
promotion.py): the alias moves only to a better model, every model stays comparable.

A run that fired a sweep waits for the sweep to end; its candidate is then the
sweep's best trial (by the sweep's objective), judged as above on the schedule's
metric; a sweep without a best trial is `not_eligible`.

A schedule with `evaluate:` judges on its holdout instead (services/retraining/
evaluation.py): the run waits for its evaluation jobs, then compares the new model's value
with the holder's on the same holdout digest, or is `evaluation_failed`.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.jobs import store as jobs
from services.models import Job, MetricPoint, Schedule, ScheduleRun, Sweep, utcnow
from services.registry import promotion as registry
from services.registry.versions import registered_job_ids
from services.retraining import evaluation
from services.settings import Settings, get_settings
from services.statuses import TERMINAL_STATUSES, TERMINAL_SWEEP_STATUSES, JobStatus

# Metrics reach SQL through a Redis stream, separately from the replica's exit:
# give a finished job's last points this long to arrive before "no_metric".
METRIC_GRACE_SECONDS = 60.0


def last_metric(*, session: Session, job: Job, name: str) -> float | None:
    """The last value of metric `name` reported by replica 0 in the job's current attempt."""
    return session.execute(
        sa.select(MetricPoint.value)
        .where(
            MetricPoint.job_id == job.id,
            MetricPoint.attempt == job.attempt,
            MetricPoint.replica == 0,
            MetricPoint.name == name,
        )
        .order_by(MetricPoint.step.desc(), MetricPoint.id.desc())
        .limit(1)
    ).scalar_one_or_none()


def is_better(value: float, current: float | None, mode: str) -> bool:
    """Whether `value` beats the promoted `current` (None: nothing promoted yet)."""
    if current is None:
        return True
    return value > current if mode == "max" else value < current


def _decide(
    session: Session,
    run: ScheduleRun,
    job: Job,
    schedule: Schedule,
    now: dt.datetime,
    settings: Settings | None = None,
) -> bool:
    """Record the decision for one ended run; False when it must wait for metrics."""
    metric = schedule.promote_metric or ""
    judged = None
    if job.status is JobStatus.SUCCEEDED and schedule.evaluate:
        judged = evaluation.judge(
            session=session, settings=settings or get_settings(), run=run, job=job,
            schedule=schedule, now=now,
        )  # fmt: skip
        if judged is None:
            return False  # its evaluation jobs are running
    if job.status is not JobStatus.SUCCEEDED:
        run.decision, run.decision_reason = "not_eligible", f"job {job.status}"
    elif judged is not None and judged.failure:
        run.decision, run.decision_reason = "evaluation_failed", judged.failure
    else:
        value = (
            last_metric(session=session, job=job, name=metric) if judged is None else judged.value
        )
        if value is None:
            finished = job.finished_at or now
            if (now - finished).total_seconds() < METRIC_GRACE_SECONDS:
                return False
            run.decision = "no_metric"
            run.decision_reason = f"job {job.id} reported no {metric!r} on replica 0"
        else:
            previous = schedule.promoted_value if judged is None else judged.previous
            _judge(session, run, job, schedule, value, previous, now)
    run.decided_at = now
    return True


def _judge(
    session: Session,
    run: ScheduleRun,
    job: Job,
    schedule: Schedule,
    value: float,
    previous: float | None,
    now: dt.datetime,
) -> None:
    """Promoted or kept: `value` against the holder's `previous` (the same holdout's when
    the schedule evaluates). Either way the run's model becomes the next version."""
    metric, previous_job = schedule.promote_metric or "", schedule.promoted_job_id
    run.metric_value = value
    version = registry.register_run(session=session, schedule=schedule, job=job, now=now)
    if is_better(value, previous, schedule.promote_mode):
        schedule.promoted_job_id, schedule.promoted_value = job.id, value
        run.decision = "promoted"
        run.decision_reason = (
            f"{metric}={value:.6g} is the first promoted value"
            if previous is None
            else f"{metric}={value:.6g} beats job {previous_job}'s {previous:.6g} "
            f"({schedule.promote_mode})"
        )
        registry.promote_version(
            session=session, schedule=schedule, version=version,
            reason=run.decision_reason, now=now,
        )  # fmt: skip
    else:
        run.decision = "kept"
        run.decision_reason = (
            f"{metric}={value:.6g} does not beat job {previous_job}'s {previous:.6g} "
            f"({schedule.promote_mode}); kept job {previous_job}"
        )
    run.decision_reason += f"; registered as version {version.version}"


def _pick_sweep_candidates(session: Session, now: dt.datetime) -> list[ScheduleRun]:
    """A pending run of an ended sweep takes the sweep's best trial as its job (decided
    then like any job's run); without a best trial it is not eligible."""
    decided = []
    rows = session.execute(
        sa.select(ScheduleRun, Sweep)
        .join(Sweep, Sweep.id == ScheduleRun.sweep_id)
        .where(
            ScheduleRun.decision == "pending",
            ScheduleRun.job_id.is_(None),
            Sweep.status.in_(TERMINAL_SWEEP_STATUSES),
        )
    ).all()
    for run, sweep in rows:
        if sweep.best_job_id is None:
            run.decision, run.decided_at = "not_eligible", now
            run.decision_reason = f"sweep {sweep.id} {sweep.status}: {sweep.reason}"
            decided.append(run)
        else:
            run.job_id = sweep.best_job_id
            run.reason += f"; sweep {sweep.id} {sweep.status}, best trial job {sweep.best_job_id}"
    session.flush()
    return decided


def decide_pending(
    *, session: Session, now: dt.datetime | None = None, settings: Settings | None = None
) -> list[ScheduleRun]:
    """Decide every pending run whose job (or sweep) has ended; returns the runs decided.
    `settings`: what evaluation jobs are made under (a schedule with `evaluate:`)."""
    now = now or utcnow()
    # Every pass asks; nearly every pass has no run waiting for its decision: one look
    # at the index of pending runs then, not three queries (the idle pass's cost, issue 33).
    pending = sa.select(ScheduleRun.id).where(ScheduleRun.decision == "pending").limit(1)
    if session.execute(pending).first() is None:
        return []
    decided = _pick_sweep_candidates(session, now)
    rows = session.execute(
        sa.select(ScheduleRun, Job)
        .join(Job, Job.id == ScheduleRun.job_id)
        .where(ScheduleRun.decision == "pending", Job.status.in_(TERMINAL_STATUSES))
        .order_by(Job.finished_at, Job.id)
    ).all()
    # A job deleted before its decision (a TTL, a history limit) leaves nothing to judge;
    # a sweep's run has no job until the sweep ends.
    for run in session.execute(
        sa.select(ScheduleRun).where(
            ScheduleRun.decision == "pending",
            ScheduleRun.job_id.is_(None),
            ScheduleRun.sweep_id.is_(None),
        )
    ).scalars():
        run.decision, run.decision_reason, run.decided_at = "not_eligible", "job deleted", now
        decided.append(run)
    for run, job in rows:
        # Lock the schedule: two decisions of one schedule compare against one value.
        schedule = session.execute(
            sa.select(Schedule)
            .where(Schedule.id == run.schedule_id)
            .with_for_update(of=Schedule)
            .execution_options(populate_existing=True)
        ).scalar_one()
        if not schedule.promote_metric:
            run.decision, run.decision_reason = None, "promotion was turned off"
            continue
        if _decide(session, run, job, schedule, now, settings):
            decided.append(run)
    session.flush()
    return decided


def prune_history(*, session: Session, schedule: Schedule) -> list[int]:
    """Delete the schedule's oldest ended jobs beyond its history limits (Kubernetes
    CronJob's successful/failed history limits). The promoted job, registered jobs (a
    model version's), active jobs and jobs awaiting a promotion decision are kept; run
    records stay. Returns deleted ids."""
    limits = (
        (schedule.successful_jobs_history_limit, [JobStatus.SUCCEEDED]),
        (schedule.failed_jobs_history_limit, [JobStatus.FAILED, JobStatus.CANCELLED]),
    )
    pending = sa.select(ScheduleRun.job_id).where(
        ScheduleRun.schedule_id == schedule.id,
        ScheduleRun.decision == "pending",
        ScheduleRun.job_id.is_not(None),
    )
    deleted: list[int] = []
    for limit, statuses in limits:
        if limit is None:
            continue
        ended = list(
            session.execute(
                sa.select(Job)
                .where(
                    Job.schedule_id == schedule.id, Job.status.in_(statuses), Job.id.not_in(pending)
                )
                .order_by(Job.id.desc())
            ).scalars()
        )
        beyond = [job.id for job in ended[limit:] if job.id != schedule.promoted_job_id]
        # A registered version keeps its job: its model files are the job's.
        kept = registered_job_ids(session=session, job_ids=beyond)
        deleted += [job_id for job_id in beyond if job_id not in kept]
    jobs.delete_jobs(session=session, job_ids=deleted)
    return deleted
