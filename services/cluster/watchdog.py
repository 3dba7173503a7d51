"""Finds what broke without telling anyone, for the scheduling pass to act on.

* lost nodes: no heartbeat heard for NODE_TIMEOUT; their live replicas are lost (every
  time here is the control plane's clock: services/cluster/arrivals.py);
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
* unanswered starts: a replica placed on a ready node whose agent, START_ANSWER_TIMEOUT
  later, neither runs it, nor works on any start, nor reports its exit is lost (re-sent
  starts did not help: an agent that cannot act on them);
* deadlines: a job older than its active_deadline_seconds fails;
* finished jobs whose ttl_seconds_after_finished has passed get their scratch
  files removed on every node that ran them.

The running replicas' checks (lost exits, hung replicas) are running_checks.py's; the
rest is here. Each finding only changes replica rows or job status; `gangs.settle_job`
then tears the gang down and restarts or fails the job in one place.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.cluster import gangs, nodes
from services.cluster.running_checks import Key, record_beat_exit
from services.jobs.transitions import transition_job
from services.models import Job, Node, Replica
from services.settings import Settings
from services.statuses import (
    LIVE_NODE_STATUSES,
    TERMINAL_REPLICA_STATUSES,
    TERMINAL_STATUSES,
    JobStatus,
    ReplicaStatus,
)
from services.wire.replica import CleanupJob, Message


def _live_replicas(session: Session, *where: sa.ColumnElement[bool]) -> list[Replica]:
    return list(
        session.execute(
            sa.select(Replica).where(Replica.status.not_in(TERMINAL_REPLICA_STATUSES), *where)
        ).scalars()
    )


def reap_lost_nodes(*, session: Session, settings: Settings, now: dt.datetime) -> list[str]:
    """Mark silent nodes lost, and every live replica on them."""
    lost = nodes.mark_lost_nodes(session=session, now=now, timeout=settings.NODE_TIMEOUT)
    if lost:
        for replica in _live_replicas(session, Replica.node_id.in_(lost)):
            gangs.record_replica_failure(
                replica=replica,
                lost=True,
                at=now,
                failure=f"lost: node {replica.node_id} stopped answering "
                f"(no heartbeat for {settings.NODE_TIMEOUT:.0f}s)",
            )
        session.flush()
    return lost


def excuse_silence(*, session: Session, now: dt.datetime) -> None:
    """Redis lost its data (services/wire/generation.py), or may have while this
    scheduler was not leading (a new term): the heartbeats and progress beats it held are
    gone, and the senders' next ones are still on their way. The silence was the control
    plane's, not theirs: every ready node and every running replica that has shown
    progress counts as heard `now`, so none is declared lost or hung for it; one that
    stays silent is, one timeout from now. (A new leader loses nothing by it: it times
    the beats it finds in Redis by their arrival, its first read, anyway.)"""
    session.execute(
        sa.update(Node)
        .where(Node.status.in_(LIVE_NODE_STATUSES), Node.last_heartbeat < now)
        .values(last_heartbeat=now)
    )
    session.execute(
        sa.update(Replica)
        .where(Replica.status == ReplicaStatus.RUNNING, Replica.progress_at < now)
        .values(progress_at=now)
    )
    session.expire_all()  # rows this session holds read the new times


def declared_but_running(
    *, session: Session, heartbeats: list[nodes.Heartbeat], running: set[Key], ready: set[str]
) -> frozenset[Key]:
    """Replicas Cohort settled without an exit of theirs (declared hung, or lost) that
    their own node's agent still lists as running, the node being `ready` (a lost node's
    last beat stays in Redis for good, and says nothing of now): their process is still
    there. Its stop may have been lost (a Redis that restarted empty loses the queued
    message), or not have taken effect yet; either way the gang must not be placed again
    meanwhile (gangs.settle_job) and the stop is sent again (gangs._stop_live).
    `running`: the replicas running in SQL (check_running's), which a beat lists as a
    matter of course: only the rest are looked up, usually none."""
    listed = {
        key: beat.node_id
        for beat in heartbeats
        if beat.node_id in ready
        for key in beat.running
        if key not in running
    }
    if not listed:
        return frozenset()
    rows = session.execute(
        sa.select(Replica.job_id, Replica.attempt, Replica.index, Replica.node_id).where(
            sa.tuple_(Replica.job_id, Replica.attempt, Replica.index).in_(list(listed)),
            Replica.status.in_(TERMINAL_REPLICA_STATUSES),
            Replica.exit_code.is_(None),
        )
    )
    return frozenset(
        (job_id, attempt, index)
        for job_id, attempt, index, node_id in rows
        if listed[(job_id, attempt, index)] == node_id
    )


def settle_unanswered_starts(
    *,
    session: Session,
    settings: Settings,
    heartbeats: list[nodes.Heartbeat],
    ready: set[str],
    now: dt.datetime,
) -> list[Replica]:
    """Declare lost every replica of a current attempt still pending START_ANSWER_TIMEOUT
    after its placement on a `ready` node whose agent, in a beat written after that
    (`after`), neither runs it nor works on any start (one whose exit the beat lists is
    settled by that exit: its refusal's event was lost). The re-sent starts
    (queue_placement.resend_stale_starts) reach an agent that cannot act on them: nothing else
    would ever settle the replica, and its job would stay `scheduled`, holding its slots.
    Returns the replicas declared lost; `gangs.settle_job` tears the gang down and the
    restart policy decides (a lost replica's failure is retryable)."""
    limit = dt.timedelta(seconds=settings.START_ANSWER_TIMEOUT)
    # An agent working on any start (restoring a checkpoint, fetching code) may hold the
    # others in its queue meanwhile (a few at a time): its silence on them is not theirs.
    by_node = {
        beat.node_id: beat for beat in heartbeats if beat.node_id in ready and not beat.preparing
    }
    if not by_node:
        return []
    lost: list[Replica] = []
    for replica in _pending_since(session, now - limit):
        beat = by_node.get(replica.node_id)
        if beat is None:  # lost, or silent: reap_lost_nodes' to settle
            continue
        key = (replica.job_id, replica.attempt, replica.index)
        # Only a beat written once the agent had the whole limit to answer says it did
        # not (`after` bounds when it was written from below; None: unknown).
        if beat.after is None or beat.after < replica.created_at + limit or key in beat.running:
            continue
        if key in beat.exited:  # refused, and the event that said so was lost
            record_beat_exit(session, key, beat)
            continue
        gangs.record_replica_failure(
            replica=replica,
            lost=True,
            at=now,
            failure=f"lost: the agent of {replica.node_id} did not start it within "
            f"{settings.START_ANSWER_TIMEOUT:.0f}s of its placement (not running, "
            "fetching its code or exited there)",
        )
        lost.append(replica)
    if lost:
        session.flush()
    return lost


def _pending_since(session: Session, placed_before: dt.datetime) -> list[Replica]:
    """The pending replicas of scheduled jobs' current attempts placed before then."""
    # From the scheduled jobs (few, and indexed by status) to their replicas: not a scan
    # of every replica for the pending ones, on every pass.
    return list(
        session.execute(
            sa.select(Replica)
            .join(Job, Job.id == Replica.job_id)
            .where(
                Job.status == JobStatus.SCHEDULED,
                Replica.attempt == Job.attempt,
                Replica.status == ReplicaStatus.PENDING,
                Replica.created_at < placed_before,
            )
        ).scalars()
    )


def enforce_deadlines(*, session: Session, now: dt.datetime) -> list[int]:
    """Fail unfinished jobs that have outlived their active_deadline_seconds."""
    failed = []
    jobs = session.execute(
        sa.select(Job).where(
            Job.active_deadline_seconds.is_not(None), Job.status.not_in(TERMINAL_STATUSES)
        )
    ).scalars()
    for job in list(jobs):
        assert job.active_deadline_seconds is not None
        if now - job.created_at > dt.timedelta(seconds=job.active_deadline_seconds):
            transition_job(
                session=session,
                job_id=job.id,
                target=JobStatus.FAILED,
                reason=f"exceeded active_deadline_seconds "
                f"({job.active_deadline_seconds}s since submission)",
            )
            failed.append(job.id)
    return failed


def clean_up_finished(*, session: Session, now: dt.datetime) -> list[Message]:
    """Cleanup messages for finished jobs past their TTL (records and metrics stay)."""
    messages: list[Message] = []
    jobs = session.execute(
        sa.select(Job).where(
            Job.ttl_seconds_after_finished.is_not(None),
            Job.cleaned_at.is_(None),
            Job.status.in_(TERMINAL_STATUSES),
        )
    ).scalars()
    for job in list(jobs):
        assert job.ttl_seconds_after_finished is not None and job.finished_at is not None
        if now - job.finished_at < dt.timedelta(seconds=job.ttl_seconds_after_finished):
            continue
        replicas = list(
            session.execute(sa.select(Replica).where(Replica.job_id == job.id)).scalars()
        )
        if any(r.status not in TERMINAL_REPLICA_STATUSES for r in replicas):
            continue  # its processes go first
        job.cleaned_at = now
        messages.extend(
            CleanupJob(node_id, job.id) for node_id in sorted({r.node_id for r in replicas})
        )
    session.flush()
    return messages
