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
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services import exit_codes
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

STOP_RESEND_SECONDS = 15.0


def _replica(session: Session, job_id: int, attempt: int, index: int) -> Replica | None:
    return session.execute(
        sa.select(Replica).where(Replica.job_id == job_id, Replica.attempt == attempt,
                                 Replica.index == index)
    ).scalar_one_or_none()


def replica_node(*, session: Session, job_id: int, attempt: int, index: int) -> str | None:
    """The node replica (job, attempt, index) was placed on; None for no such replica."""
    replica = _replica(session, job_id, attempt, index)
    return replica.node_id if replica is not None else None


def record_replica_started(
    *, session: Session, job_id: int, attempt: int, index: int, pid: int, at: dt.datetime,
) -> Replica | None:
    """An agent started the process of replica (job, attempt, index)."""
    replica = _replica(session, job_id, attempt, index)
    if replica is None or replica.status in TERMINAL_REPLICA_STATUSES:
        return None  # unknown, or a late report of a replica already settled
    replica.status = ReplicaStatus.RUNNING
    replica.pid = pid
    replica.started_at = at
    session.flush()
    return replica


def record_replica_exited(
    *, session: Session, job_id: int, attempt: int, index: int, exit_code: int,
    log_tail: str, at: dt.datetime,
) -> Replica | None:
    """An agent saw the process of replica (job, attempt, index) exit."""
    replica = _replica(session, job_id, attempt, index)
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
    *, session: Session, job_id: int, attempt: int, index: int, pid: int, restarts: int,
) -> Replica | None:
    """An agent started the process of a running replica again in place (a lost
    parameter_server worker); the replica stays running."""
    replica = _replica(session, job_id, attempt, index)
    if replica is None or replica.status in TERMINAL_REPLICA_STATUSES:
        return None
    replica.pid = pid
    replica.restarts = max(replica.restarts, restarts)
    session.flush()
    return replica


def record_replica_failure(*, replica: Replica, failure: str, lost: bool,
                           at: dt.datetime) -> None:
    """Cohort itself ends a replica that cannot report (lost node, no progress)."""
    replica.status = ReplicaStatus.LOST if lost else ReplicaStatus.FAILED
    replica.failure = failure
    replica.finished_at = at


def _stop_live(replicas: list[Replica], now: dt.datetime) -> list[Message]:
    """Stop messages for replicas still alive (re-sent if the last one is old)."""
    grace = get_settings().STOP_GRACE
    messages: list[Message] = []
    for replica in replicas:
        if replica.status in TERMINAL_REPLICA_STATUSES:
            # Declared failed or lost by Cohort, not by its own exit: the process
            # may still be there (frozen, or on a node that comes back). Stop once.
            declared = replica.exit_code is None and replica.failure
            if not declared or replica.stop_requested_at is not None:
                continue
        elif replica.stop_requested_at is not None and \
                (now - replica.stop_requested_at).total_seconds() < STOP_RESEND_SECONDS:
            continue
        replica.stop_requested_at = now
        messages.append(StopReplica(replica.node_id, replica.job_id, replica.attempt,
                                    replica.index, grace))
    return messages


def _failure_reason(replica: Replica) -> str:
    if replica.failure:
        return f"replica {replica.index} on {replica.node_id} {replica.failure}"
    tail = [line for line in replica.log_tail.strip().splitlines() if line.strip()][-3:]
    detail = (": " + " | ".join(tail)) if tail else ""
    return f"replica {replica.index} on {replica.node_id} exited with " \
           f"{exit_codes.describe(replica.exit_code)}{detail}"


def _may_restart(job: Job, broken: Replica) -> tuple[bool, str]:
    """Whether the policy and the budget allow another attempt, and if not, why."""
    if job.restart_policy == "never":
        return False, "restart_policy is never"
    if job.attempt > job.max_restarts:
        return False, f"restart budget spent ({job.max_restarts} restarts)"
    if job.restart_policy == "exit_code" and not exit_codes.is_retryable(broken.exit_code):
        return False, "the exit code is not retryable"
    return True, ""


def restart_backoff(attempt: int) -> float:
    """Seconds before attempt `attempt + 1` may be placed: doubling from RESTART_BACKOFF."""
    settings = get_settings()
    return min(settings.RESTART_BACKOFF * 2 ** (attempt - 1), settings.RESTART_BACKOFF_MAX)


def _breaks_gang(replica: Replica) -> bool:
    """A failed or lost replica tears its gang down, unless it is an evaluator."""
    return replica.status in (ReplicaStatus.FAILED, ReplicaStatus.LOST) and \
        replica.role != "evaluator"


def _success(job: Job, current: list[Replica], now: dt.datetime) -> tuple[
        str | None, list[Replica]]:
    """Why the gang has succeeded (None: not yet), and the replicas to stop now."""
    if job.strategy != "parameter_server":
        done = all(r.status is ReplicaStatus.SUCCEEDED for r in current)
        return (f"all {len(current)} replicas exited 0" if done else None), []
    chief = next((r for r in current if r.role == "chief"), None)
    if chief is None or chief.status is not ReplicaStatus.SUCCEEDED:
        return None, []
    servers = [r for r in current if r.role in ("worker", "ps")]
    evaluating = [r for r in current
                  if r.role == "evaluator" and r.status not in TERMINAL_REPLICA_STATUSES]
    if evaluating and chief.finished_at is not None and (now - chief.finished_at) < \
            dt.timedelta(seconds=get_settings().EVALUATOR_GRACE):
        return None, servers  # the evaluator is finishing its last evaluation
    late = "; the evaluator was stopped after its grace" if evaluating else ""
    return f"the chief exited 0{late}", servers + evaluating


def settle_job(*, session: Session, job: Job, now: dt.datetime | None = None) -> list[Message]:
    """Bring a job's status in line with its replicas; returns the stop messages to send."""
    now = now or utcnow()
    replicas = list(session.execute(
        sa.select(Replica).where(Replica.job_id == job.id).order_by(Replica.attempt,
                                                                    Replica.index)
    ).scalars())
    if job.status in TERMINAL_STATUSES:
        return _stop_live(replicas, now)  # cancelled or finished: nothing may keep running
    old = [r for r in replicas if r.attempt < job.attempt]
    messages = _stop_live(old, now)
    current = [r for r in replicas if r.attempt == job.attempt]
    if job.status is JobStatus.RESTARTING:
        if all(r.status in TERMINAL_REPLICA_STATUSES for r in current):
            transition_job(session=session, job_id=job.id, target=JobStatus.QUEUED,
                           reason=f"gang torn down; restart {job.attempt} of {job.max_restarts}")
        return messages + _stop_live(current, now)
    if job.status not in ACTIVE_STATUSES or not current:
        return messages
    # Once a parameter_server chief has succeeded, what its servers do no longer matters.
    chief_done = any(r.role == "chief" and r.status is ReplicaStatus.SUCCEEDED
                     for r in current) and job.strategy == "parameter_server"
    broken = [] if chief_done else [r for r in current if _breaks_gang(r)]
    if broken:
        reason = _failure_reason(broken[0])
        restart, why_not = _may_restart(job, broken[0])
        if restart:
            delay = restart_backoff(job.attempt)
            job.not_before = now + dt.timedelta(seconds=delay)
            transition_job(session=session, job_id=job.id, target=JobStatus.RESTARTING,
                           reason=f"restarting (attempt {job.attempt + 1} of at most "
                                  f"{job.max_restarts + 1}, in {delay:.0f}s) after: {reason}")
        else:
            transition_job(session=session, job_id=job.id, target=JobStatus.FAILED,
                           reason=f"{reason}; not restarted: {why_not}")
        return messages + _stop_live(current, now)
    succeeded, to_stop = _success(job, current, now)
    if job.status is JobStatus.SCHEDULED and (succeeded or all(
        r.status in (ReplicaStatus.RUNNING, ReplicaStatus.SUCCEEDED) or _gone_evaluator(r)
        for r in current
    )):
        transition_job(session=session, job_id=job.id, target=JobStatus.RUNNING,
                       reason=f"all {len(current)} replicas started")
    messages += _stop_live(to_stop, now)
    if job.status is JobStatus.RUNNING and succeeded:
        transition_job(session=session, job_id=job.id, target=JobStatus.SUCCEEDED,
                       reason=succeeded)
    return messages


def _gone_evaluator(replica: Replica) -> bool:
    # An evaluator that already ended (even failed) does not hold its gang back.
    return replica.role == "evaluator" and replica.status in TERMINAL_REPLICA_STATUSES


def jobs_to_settle(*, session: Session) -> list[Job]:
    """Jobs whose status may need to follow their replicas."""
    live = sa.select(Replica.job_id).where(Replica.status.not_in(TERMINAL_REPLICA_STATUSES))
    return list(session.execute(
        sa.select(Job).where(
            sa.or_(Job.status.in_([*ACTIVE_STATUSES, JobStatus.RESTARTING]), Job.id.in_(live))
        ).order_by(Job.id)
    ).scalars())
