"""Finds what broke without telling anyone, for the scheduling pass to act on.

* lost nodes: a heartbeat older than NODE_TIMEOUT; their live replicas are lost;
* lost exits: an agent's heartbeat says a replica exited (or no longer runs) but
  its exit event never arrived (Redis restarted or flushed);
* hung replicas: no first training step within STARTUP_TIMEOUT of the spawn (a gang
  that never fully joined waits forever in TensorFlow), or no progress heartbeat
  for PROGRESS_TIMEOUT or the job's own progress_timeout_seconds (a frozen process,
  a cut network, a stuck input pipeline). A job's 0 turns the progress check off:
  its start-up limit then covers only every replica of the gang being started.
  In a parameter_server gang only the chief runs the training loop, so only the
  chief is watched: its workers and ps serve (a hung one stalls the chief), and the
  evaluator waits for checkpoints;
* deadlines: a job older than its active_deadline_seconds fails;
* finished jobs whose ttl_seconds_after_finished has passed get their scratch
  files removed on every node that ran them.

Each finding only changes replica rows or job status here; `gangs.settle_job`
then tears the gang down and restarts or fails the job in one place.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.cluster import gangs, nodes
from services.jobs.transitions import transition_job
from services.models import Job, Replica
from services.settings import Settings
from services.statuses import (
    TERMINAL_REPLICA_STATUSES,
    TERMINAL_STATUSES,
    JobStatus,
    ReplicaStatus,
)
from services.wire.replica import CleanupJob, Message

# A heartbeat must be this much newer than a replica's spawn before its absence
# from the agent's list means the process is gone (the list is read at beat time).
_SPAWN_SLACK = dt.timedelta(seconds=3)

Key = tuple[int, int, int]


def _live_replicas(session: Session, *where: sa.ColumnElement[bool]) -> list[Replica]:
    return list(session.execute(
        sa.select(Replica).where(Replica.status.not_in(TERMINAL_REPLICA_STATUSES), *where)
    ).scalars())


def reap_lost_nodes(*, session: Session, settings: Settings, now: dt.datetime) -> list[str]:
    """Mark silent nodes lost, and every live replica on them."""
    lost = nodes.mark_lost_nodes(session=session, now=now, timeout=settings.NODE_TIMEOUT)
    if lost:
        for replica in _live_replicas(session, Replica.node_id.in_(lost)):
            gangs.record_replica_failure(
                replica=replica, lost=True, at=now,
                failure=f"lost: node {replica.node_id} stopped answering "
                        f"(no heartbeat for {settings.NODE_TIMEOUT:.0f}s)")
        session.flush()
    return lost


def reconcile_heartbeats(*, session: Session, heartbeats: list[nodes.Heartbeat]) -> int:
    """Settle running replicas whose exit the agent reports only in its heartbeat."""
    settled = 0
    by_node = {beat.node_id: beat for beat in heartbeats}
    for replica in _live_replicas(session, Replica.status == ReplicaStatus.RUNNING):
        beat = by_node.get(replica.node_id)
        if beat is None or replica.started_at is None:
            continue
        key = (replica.job_id, replica.attempt, replica.index)
        if key in beat.exited:
            gangs.record_replica_exited(session=session, job_id=key[0], attempt=key[1],
                                        index=key[2], exit_code=beat.exited[key],
                                        log_tail="", at=beat.at)
            settled += 1
        elif key not in beat.running and beat.at > replica.started_at + _SPAWN_SLACK:
            gangs.record_replica_failure(
                replica=replica, lost=True, at=beat.at,
                failure="lost: its agent no longer runs it (the agent restarted?)")
            settled += 1
    session.flush()
    return settled


def note_progress(*, session: Session, progress: dict[Key, float]) -> None:
    """Keep the newest progress heartbeat of each running replica in SQL."""
    for replica in _live_replicas(session, Replica.status == ReplicaStatus.RUNNING):
        seen = progress.get((replica.job_id, replica.attempt, replica.index))
        if seen is None:
            continue
        at = dt.datetime.fromtimestamp(seen, dt.UTC)
        # Coarse on purpose: one row update per replica every few seconds at most.
        if replica.progress_at is None or at - replica.progress_at > dt.timedelta(seconds=2):
            replica.progress_at = at
    session.flush()


def hang_limit(job_progress_timeout: int | None, default: float) -> float | None:
    """Seconds a running replica may go without progress: the job's own
    `progress_timeout_seconds` if set, else the cluster's `default`; None when the
    job set 0 (no progress watchdog: the start-up timeout and the deadline still apply).
    """
    if job_progress_timeout is None:
        return default
    if job_progress_timeout < 0:
        raise ValueError(f"progress_timeout_seconds must be 0 or more, "
                         f"not {job_progress_timeout}")
    return float(job_progress_timeout) if job_progress_timeout else None


def _watch_rules(session: Session, job_ids: set[int]) -> dict[int, tuple[str, int | None]]:
    """Each job's strategy and own progress_timeout_seconds (None: the cluster default),
    in one query."""
    if not job_ids:
        return {}
    rows = session.execute(sa.select(Job.id, Job.strategy, Job.progress_timeout_seconds)
                           .where(Job.id.in_(job_ids))).tuples().all()
    return {job_id: (strategy, timeout) for job_id, strategy, timeout in rows}


def _watched(replica: Replica, strategy: str) -> bool:
    """Whether a running replica runs a training loop, so beats progress: every replica
    of the all-worker strategies; of a parameter_server gang, the chief alone."""
    return strategy != "parameter_server" or replica.role == "chief"


def _gangs_not_started(session: Session, job_ids: set[int]) -> set[tuple[int, int]]:
    """(job, attempt) of the gangs in which some replica was placed but never started."""
    if not job_ids:
        return set()
    return set(session.execute(
        sa.select(Replica.job_id, Replica.attempt).distinct()
        .where(Replica.job_id.in_(job_ids), Replica.status == ReplicaStatus.PENDING)
    ).tuples().all())


def _startup_failure(replica: Replica, limit: float | None, settings: Settings,
                     not_started: set[tuple[int, int]]) -> str | None:
    """Why a running replica that has not shown progress yet is hung, if it is."""
    startup = settings.STARTUP_TIMEOUT
    if limit is None:
        # The job turned the progress watchdog off: its loop may never show progress,
        # so the start-up limit covers only the gang's processes being started.
        if (replica.job_id, replica.attempt) in not_started:
            return (f"hung: the gang's processes were not all started within {startup:.0f}s "
                    "of this one's start")
        return None
    return (f"hung: no training step within {startup:.0f}s "
            "of its start (did every replica of the gang join?)")


def find_hung(*, session: Session, settings: Settings, now: dt.datetime) -> list[Replica]:
    """Fail running replicas that stopped making progress (or never started to)."""
    hung = []
    running = _live_replicas(session, Replica.status == ReplicaStatus.RUNNING)
    rules = _watch_rules(session, {replica.job_id for replica in running})
    running = [r for r in running if r.job_id in rules and _watched(r, rules[r.job_id][0])]
    not_started = _gangs_not_started(session, {replica.job_id for replica in running})
    for replica in running:
        if replica.started_at is None:
            continue
        limit = hang_limit(rules[replica.job_id][1], settings.PROGRESS_TIMEOUT)
        failure: str | None = None
        if replica.progress_at is None:
            if now - replica.started_at > dt.timedelta(seconds=settings.STARTUP_TIMEOUT):
                failure = _startup_failure(replica, limit, settings, not_started)
        elif limit is not None and now - replica.progress_at > dt.timedelta(seconds=limit):
            failure = f"hung: no progress for {limit:.0f}s"
        if failure is None:
            continue
        gangs.record_replica_failure(replica=replica, failure=failure, lost=False, at=now)
        hung.append(replica)
    session.flush()
    return hung


def enforce_deadlines(*, session: Session, now: dt.datetime) -> list[int]:
    """Fail unfinished jobs that have outlived their active_deadline_seconds."""
    failed = []
    jobs = session.execute(sa.select(Job).where(
        Job.active_deadline_seconds.is_not(None), Job.status.not_in(TERMINAL_STATUSES))
    ).scalars()
    for job in list(jobs):
        assert job.active_deadline_seconds is not None
        if now - job.created_at > dt.timedelta(seconds=job.active_deadline_seconds):
            transition_job(session=session, job_id=job.id, target=JobStatus.FAILED,
                           reason=f"exceeded active_deadline_seconds "
                                  f"({job.active_deadline_seconds}s since submission)")
            failed.append(job.id)
    return failed


def clean_up_finished(*, session: Session, now: dt.datetime) -> list[Message]:
    """Cleanup messages for finished jobs past their TTL (records and metrics stay)."""
    messages: list[Message] = []
    jobs = session.execute(sa.select(Job).where(
        Job.ttl_seconds_after_finished.is_not(None), Job.cleaned_at.is_(None),
        Job.status.in_(TERMINAL_STATUSES))
    ).scalars()
    for job in list(jobs):
        assert job.ttl_seconds_after_finished is not None and job.finished_at is not None
        if now - job.finished_at < dt.timedelta(seconds=job.ttl_seconds_after_finished):
            continue
        replicas = list(session.execute(
            sa.select(Replica).where(Replica.job_id == job.id)).scalars())
        if any(r.status not in TERMINAL_REPLICA_STATUSES for r in replicas):
            continue  # its processes go first
        job.cleaned_at = now
        messages.extend(CleanupJob(node_id, job.id)
                        for node_id in sorted({r.node_id for r in replicas}))
    session.flush()
    return messages
