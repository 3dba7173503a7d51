"""A job's gang: apply replica reports from agents, and settle the job's status from them.

`settle_job` is the one place that turns the state of a gang's replicas into a job
status: all started -> running; all exited 0 -> succeeded; one failed or lost ->
tear the gang down, then restart it or fail the job.

A parameter_server gang, as TensorFlow intends it:
* success is the chief's exit 0: its workers and ps (which never exit by themselves)
  are stopped then, and the evaluator gets EVALUATOR_GRACE to finish evaluating the
  last checkpoint before it is stopped and the job succeeds;
* a worker process that dies is started again in place by its agent (the coordinator
  retries its closures meanwhile; workers/node/respawn.py), up to PS_WORKER_RESTARTS
  times: only an exit past that budget reaches here, and restarts the gang;
* a chief or ps that fails, or any training process on a lost node, restarts the gang
  from its checkpoint (per restart_policy);
* the evaluator's failure never fails training.

What the replicas add up to (a success, a break, whether and when it restarts) is
gang_outcome.py's; the replica reports, the stops and the settling are here.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.cluster import gang_outcome
from services.jobs.transitions import transition_job
from services.models import Job, Replica, utcnow
from services.settings import get_settings
from services.statuses import (
    ACTIVE_STATUSES,
    TERMINAL_REPLICA_STATUSES,
    TERMINAL_STATUSES,
    JobStatus,
    ReplicaStatus,
)
from services.wire.replica import Message, StopReplica


def find_replica(session: Session, job_id: int, attempt: int, index: int) -> Replica | None:
    """Replica `index` of the job's `attempt`, if there is one."""
    return session.execute(
        sa.select(Replica).where(
            Replica.job_id == job_id, Replica.attempt == attempt, Replica.index == index
        )
    ).scalar_one_or_none()


def current_attempts(*, session: Session) -> dict[int, int]:
    """The attempt of every job whose gang is placed or running (what agents check a
    start message against), by job id."""
    return dict(
        session.execute(
            sa.select(Job.id, Job.attempt).where(
                Job.status.in_((JobStatus.SCHEDULED, JobStatus.RUNNING))
            )
        )
        .tuples()
        .all()
    )


def replica_node(*, session: Session, job_id: int, attempt: int, index: int) -> str | None:
    """The node replica (job, attempt, index) was placed on; None for no such replica."""
    replica = find_replica(session, job_id, attempt, index)
    return replica.node_id if replica is not None else None


def record_replica_started(
    *,
    session: Session,
    job_id: int,
    attempt: int,
    index: int,
    pid: int,
    at: dt.datetime,
) -> Replica | None:
    """An agent started the process of replica (job, attempt, index)."""
    replica = find_replica(session, job_id, attempt, index)
    if replica is None or replica.status in TERMINAL_REPLICA_STATUSES:
        return None  # unknown, or a late report of a replica already settled
    replica.status = ReplicaStatus.RUNNING
    replica.pid = pid
    replica.started_at = at
    replica.preparing = ""
    session.flush()
    return replica


def record_replica_exited(
    *,
    session: Session,
    job_id: int,
    attempt: int,
    index: int,
    exit_code: int,
    log_tail: str,
    at: dt.datetime,
) -> Replica | None:
    """An agent saw the process of replica (job, attempt, index) exit."""
    replica = find_replica(session, job_id, attempt, index)
    if replica is None or replica.status in TERMINAL_REPLICA_STATUSES:
        return None
    if exit_code == 0:
        replica.status = ReplicaStatus.SUCCEEDED
    elif replica.stop_requested_at is not None:
        replica.status = ReplicaStatus.STOPPED  # we asked it to go
    else:
        replica.status = ReplicaStatus.FAILED
    replica.exit_code = exit_code
    replica.log_tail = log_tail[-4000:]
    replica.finished_at = at
    session.flush()
    return replica


def record_replica_restarted(
    *,
    session: Session,
    job_id: int,
    attempt: int,
    index: int,
    pid: int,
    restarts: int,
) -> Replica | None:
    """An agent started the process of a running replica again in place (a lost
    parameter_server worker); the replica stays running."""
    replica = find_replica(session, job_id, attempt, index)
    if replica is None or replica.status in TERMINAL_REPLICA_STATUSES:
        return None
    replica.pid = pid
    replica.restarts = max(replica.restarts, restarts)
    session.flush()
    return replica


def record_replica_failure(*, replica: Replica, failure: str, lost: bool, at: dt.datetime) -> None:
    """Cohort itself ends a replica that cannot report (lost node, no progress)."""
    replica.status = ReplicaStatus.LOST if lost else ReplicaStatus.FAILED
    replica.failure = failure
    replica.finished_at = at


# (job, attempt, index) of replicas declared hung or lost whose agent still lists them as
# running (watchdog.declared_but_running); None: not known (an agent's event, not a pass).
Held = frozenset[tuple[int, int, int]] | None


def _key(replica: Replica) -> tuple[int, int, int]:
    return replica.job_id, replica.attempt, replica.index


def _declared(replica: Replica) -> bool:
    """Settled by Cohort (hung, lost), not by an exit of its own: its process may remain."""
    return replica.exit_code is None and bool(replica.failure)


def _stop_live(replicas: list[Replica], now: dt.datetime, held: Held = None) -> list[Message]:
    """Stop messages for replicas still alive (re-sent if the last one is old)."""
    settings = get_settings()
    grace = settings.STOP_GRACE
    messages: list[Message] = []
    for replica in replicas:
        resend_due = (
            replica.stop_requested_at is not None
            and (now - replica.stop_requested_at).total_seconds() >= settings.STOP_RESEND_AFTER
        )
        if replica.status in TERMINAL_REPLICA_STATUSES:
            # Declared failed or lost by Cohort, not by its own exit: the process
            # may still be there (frozen, or on a node that comes back). Stopped once,
            # and again while its agent says it still runs (a lost message).
            listed = held is not None and _key(replica) in held
            if not _declared(replica) or (
                replica.stop_requested_at is not None and not (resend_due and listed)
            ):
                continue
        elif replica.stop_requested_at is not None and not resend_due:
            continue
        replica.stop_requested_at = now
        messages.append(
            StopReplica(replica.node_id, replica.job_id, replica.attempt, replica.index, grace)
        )
    return messages


def stop_replicas(replicas: list[Replica], now: dt.datetime) -> list[Message]:
    """Stop messages for those of `replicas` still alive (a gang torn down elsewhere:
    drains.py)."""
    return _stop_live(replicas, now)


def settle_job(
    *,
    session: Session,
    job: Job,
    now: dt.datetime | None = None,
    replicas: list[Replica] | None = None,
    held: Held = None,
) -> list[Message]:
    """Bring a job's status in line with its replicas; returns the stop messages to send.

    `replicas`: every replica of the job by (attempt, index), when the caller read them
    for many jobs at once (replicas_of); else they are read here. `held`: a pass's
    watchdog.declared_but_running (None from an agent's event: not known).
    """
    now = now or utcnow()
    if replicas is None:
        replicas = replicas_of(session=session, job_ids=[job.id]).get(job.id, [])
    if job.status in TERMINAL_STATUSES:
        # cancelled or finished: nothing may keep running
        return _stop_live(replicas, now, held)
    old = [r for r in replicas if r.attempt < job.attempt]
    messages = _stop_live(old, now, held)
    current = [r for r in replicas if r.attempt == job.attempt]
    if job.status is JobStatus.RESTARTING:
        if all(r.status in TERMINAL_REPLICA_STATUSES for r in current) and not _still_running(
            current, held, now
        ):
            transition_job(
                session=session,
                job_id=job.id,
                target=JobStatus.QUEUED,
                reason=f"gang torn down; {job.attempt - job.moved_attempts} of "
                f"{job.max_restarts} restarts used",
            )
        return messages + _stop_live(current, now, held)
    if job.status not in ACTIVE_STATUSES or not current:
        return messages
    # Once a parameter_server chief has succeeded, what its servers do no longer matters.
    chief_done = (
        any(r.role == "chief" and r.status is ReplicaStatus.SUCCEEDED for r in current)
        and job.strategy == "parameter_server"
    )
    broken = [] if chief_done else [r for r in current if gang_outcome.breaks_gang(r)]
    if broken and gang_outcome.draining(current):
        return messages  # its peers are saving: drains.advance_drains moves the gang
    if broken:
        gang_outcome.tear_down(session=session, job=job, current=current, broken=broken[0], now=now)
        return messages + _stop_live(current, now)
    return messages + _follow_replicas(session, job, current, now)


def _follow_replicas(
    session: Session, job: Job, current: list[Replica], now: dt.datetime
) -> list[Message]:
    """Move a job whose gang is whole on: scheduled to running once every replica runs,
    running to succeeded once the gang has (gang_outcome.success); the stop messages of
    the replicas a success leaves behind."""
    succeeded, to_stop = gang_outcome.success(job, current, now)
    if job.status is JobStatus.SCHEDULED and (
        succeeded
        or all(
            r.status in (ReplicaStatus.RUNNING, ReplicaStatus.SUCCEEDED)
            or gang_outcome.gone_evaluator(r)
            for r in current
        )
    ):
        transition_job(
            session=session,
            job_id=job.id,
            target=JobStatus.RUNNING,
            reason=f"all {len(current)} replicas started",
        )
    messages = _stop_live(to_stop, now)
    if job.status is JobStatus.RUNNING and succeeded:
        transition_job(session=session, job_id=job.id, target=JobStatus.SUCCEEDED, reason=succeeded)
    return messages


# How many stops, each re-sent STOP_RESEND_AFTER after the last, a replica declared hung
# or lost that its agent still lists may hold its gang back for (with their grace): past
# that the gang goes on, so that an agent whose list never lets go cannot stall the job.
HOLD_STOPS = 4


def _still_running(current: list[Replica], held: Held, now: dt.datetime) -> bool:
    """Whether a replica of the gang that Cohort declared hung or lost may still run: its
    agent lists it (`held`), or, from an agent's event, it is not known (the next pass
    decides). A gang is placed again only once none does: two attempts of a job never run
    side by side, even when the stop of a declared replica was lost (the 200-job chaos
    soak saw a replica outlive the restart delay by 16 s). A replica declared lost on a
    lost node holds nothing back (watchdog.declared_but_running): its lease stopped it."""
    settings = get_settings()
    limit = settings.STOP_GRACE + HOLD_STOPS * settings.STOP_RESEND_AFTER
    declared = [
        r
        for r in current
        if _declared(r) and (r.finished_at is None or (now - r.finished_at).total_seconds() < limit)
    ]
    if not declared:
        return False
    return held is None or any(_key(r) in held for r in declared)


def replicas_of(*, session: Session, job_ids: list[int]) -> dict[int, list[Replica]]:
    """Every replica of each job, by (attempt, index), in one query (a pass settles
    thousands of jobs: one query each would be most of its time)."""
    by_job: dict[int, list[Replica]] = {}
    if not job_ids:
        return by_job
    # Chunked: one IN list per few thousand jobs keeps the statement's size bounded.
    for start in range(0, len(job_ids), 5000):
        chunk = job_ids[start : start + 5000]
        for replica in session.execute(
            sa.select(Replica)
            .where(Replica.job_id.in_(chunk))
            .order_by(Replica.job_id, Replica.attempt, Replica.index)
        ).scalars():
            by_job.setdefault(replica.job_id, []).append(replica)
    return by_job


def jobs_to_settle(*, session: Session, held: Held = None) -> list[Job]:
    """Jobs whose status may need to follow their replicas, and those with a replica in
    `held` (a stop to send again).

    Not the jobs settle_job would leave as they are, which on a busy cluster are most
    of them, read on every pass: a running job whose current gang is running, every
    replica of it, with nothing of an older attempt still alive or never told to stop.
    (settle_job then finds nothing broken, nothing succeeded, nothing to stop.)
    """
    mine = Replica.job_id == Job.id
    current_changed = sa.exists().where(
        mine, Replica.attempt == Job.attempt, Replica.status != ReplicaStatus.RUNNING
    )
    older_to_stop = sa.exists().where(
        mine,
        Replica.attempt != Job.attempt,
        sa.or_(
            Replica.status.not_in(TERMINAL_REPLICA_STATUSES),
            sa.and_(
                Replica.exit_code.is_(None),
                Replica.failure != "",
                Replica.stop_requested_at.is_(None),
            ),
        ),
    )
    steady = sa.and_(Job.status == JobStatus.RUNNING, ~current_changed, ~older_to_stop)
    live = sa.select(Replica.job_id).where(Replica.status.not_in(TERMINAL_REPLICA_STATUSES))
    unsettled = sa.and_(
        sa.or_(Job.status.in_([*ACTIVE_STATUSES, JobStatus.RESTARTING]), Job.id.in_(live)), ~steady
    )
    if held:
        unsettled = sa.or_(unsettled, Job.id.in_({key[0] for key in held}))
    return list(session.execute(sa.select(Job).where(unsettled).order_by(Job.id)).scalars())
