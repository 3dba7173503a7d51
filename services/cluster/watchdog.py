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

Each finding only changes replica rows or job status here; `gangs.settle_job`
then tears the gang down and restarts or fails the job in one place.
"""

from __future__ import annotations

import datetime as dt
from typing import NamedTuple, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.orm.util import identity_key

from services.cluster import gangs, nodes
from services.db import read_rows
from services.jobs.transitions import transition_job
from services.models import Job, Node, Replica
from services.settings import Settings
from services.statuses import (
    TERMINAL_REPLICA_STATUSES,
    TERMINAL_STATUSES,
    JobStatus,
    NodeStatus,
    ReplicaStatus,
)
from services.wire.replica import CleanupJob, Message

# A heartbeat must be this much newer than a replica's spawn before its absence
# from the agent's list means the process is gone (the list is read at beat time).
_SPAWN_SLACK = dt.timedelta(seconds=3)

Key = tuple[int, int, int]

# How far SQL's copy of a running replica's progress may lag the beats the pass reads
# (the pass judges by the newer of the two). It is there for the next leader, whose
# first pass excuses the silence anyway (excuse_silence): a row is rewritten at most
# every this often, not on every beat of every replica.
PROGRESS_STORE_EVERY = dt.timedelta(seconds=30)


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
        .where(Node.status == NodeStatus.READY, Node.last_heartbeat < now)
        .values(last_heartbeat=now)
    )
    session.execute(
        sa.update(Replica)
        .where(Replica.status == ReplicaStatus.RUNNING, Replica.progress_at < now)
        .values(progress_at=now)
    )
    session.expire_all()  # rows this session holds read the new times


def hang_limit(job_progress_timeout: int | None, default: float) -> float | None:
    """Seconds a running replica may go without progress: the job's own
    `progress_timeout_seconds` if set, else the cluster's `default`; None when the
    job set 0 (no progress watchdog: the start-up timeout and the deadline still apply).
    """
    if job_progress_timeout is None:
        return default
    if job_progress_timeout < 0:
        raise ValueError(f"progress_timeout_seconds must be 0 or more, not {job_progress_timeout}")
    return float(job_progress_timeout) if job_progress_timeout else None


def _watched(role: str, strategy: str) -> bool:
    """Whether a running replica runs a training loop, so beats progress: every replica
    of the all-worker strategies; of a parameter_server gang, the chief alone."""
    return strategy != "parameter_server" or role == "chief"


def _gangs_not_started(session: Session) -> set[tuple[int, int]]:
    """(job, attempt) of the gangs in which some replica was placed but never started,
    among the gangs with a replica running."""
    running = sa.select(Replica.job_id).where(Replica.status == ReplicaStatus.RUNNING)
    return set(
        session.execute(
            sa.select(Replica.job_id, Replica.attempt)
            .distinct()
            .where(Replica.job_id.in_(running), Replica.status == ReplicaStatus.PENDING)
        )
        .tuples()
        .all()
    )


def _startup_failure(
    job_id: int,
    attempt: int,
    limit: float | None,
    settings: Settings,
    not_started: set[tuple[int, int]],
) -> str | None:
    """Why a running replica that has not shown progress yet is hung, if it is."""
    startup = settings.STARTUP_TIMEOUT
    if limit is None:
        # The job turned the progress watchdog off: its loop may never show progress,
        # so the start-up limit covers only the gang's processes being started.
        if (job_id, attempt) in not_started:
            return (
                f"hung: the gang's processes were not all started within {startup:.0f}s "
                "of this one's start"
            )
        return None
    return (
        f"hung: no training step within {startup:.0f}s "
        "of its start (did every replica of the gang join?)"
    )


class Checked(NamedTuple):
    hung: list[Replica]  # declared hung in this check
    running: set[Key]  # every replica running in SQL after the check (not those hung)


def check_running(
    *,
    session: Session,
    settings: Settings,
    heartbeats: list[nodes.Heartbeat],
    progress: dict[Key, float],
    now: dt.datetime,
) -> Checked:
    """Every running replica, read once as a few columns (a busy cluster runs thousands;
    rows are loaded only for what changes), checked in turn against:

    * its agent's heartbeat: an exit the agent reports only there is recorded; a replica
      the agent no longer runs is lost;
    * its progress: `progress` gives the time (the control plane's clock, arrivals.py)
      each replica is alive through; SQL keeps it coarsely (PROGRESS_STORE_EVERY);
    * its limits: a replica without progress for its limit, or without a first step
      within STARTUP_TIMEOUT, is hung and fails.

    Returns the hung replicas, and the keys of every replica read as running and not
    declared hung here.
    """
    by_node = {beat.node_id: beat for beat in heartbeats}
    hung: list[Replica] = []
    running: set[Key] = set()
    stored: dict[int, float] = {}
    not_started: set[tuple[int, int]] | None = None  # read when first needed
    # Times as unix seconds in the loop: a datetime and a timedelta per row per
    # comparison were most of its cost.
    now_s = now.timestamp()
    store_every = PROGRESS_STORE_EVERY.total_seconds()
    limits: dict[int | None, float | None] = {}
    rows = read_rows(
        session,
        sa.select(
            Replica.id,
            Replica.job_id,
            Replica.attempt,
            Replica.index,
            Replica.node_id,
            Replica.role,
            Replica.started_at,
            Replica.progress_at,
            Job.strategy,
            Job.progress_timeout_seconds,
        )
        .join(Job, Job.id == Replica.job_id)
        .where(Replica.status == ReplicaStatus.RUNNING),
    )
    for (
        rid,
        job_id,
        attempt,
        index,
        node_id,
        role,
        started_at,
        progress_at,
        strategy,
        job_timeout,
    ) in rows:
        key = (job_id, attempt, index)
        running.add(key)
        beat = by_node.get(node_id)
        # (Most replicas are in their agent's list and not among its exits.)
        if (
            beat is not None
            and started_at is not None
            and (key in beat.exited or key not in beat.running)
            and _settled_by_beat(session, rid, key, started_at, beat)
        ):
            continue
        alive = None if progress_at is None else progress_at.timestamp()
        seen = progress.get(key)
        if seen is not None:
            if alive is None or seen - alive > store_every:
                stored[rid] = seen
            if alive is None or seen > alive:
                alive = seen  # judged by the newest beat, stored or not
        if started_at is None or not _watched(role, strategy):
            continue
        if beat is not None and now_s - beat.at.timestamp() > settings.AGENT_LEASE:
            # Its node has not been heard from for longer than its agent's lease: the
            # agent's replicas stop themselves by then (workers/node/lease.py), so their
            # silence is the node's, which reap_lost_nodes settles at NODE_TIMEOUT. Judged
            # hung first, the gang would be placed again on that silent node.
            continue
        if job_timeout not in limits:  # a few distinct values among thousands of rows
            limits[job_timeout] = hang_limit(job_timeout, settings.PROGRESS_TIMEOUT)
        limit = limits[job_timeout]
        failure: str | None = None
        if alive is None:
            if now_s - started_at.timestamp() > settings.STARTUP_TIMEOUT:
                if not_started is None and limit is None:
                    not_started = _gangs_not_started(session)
                failure = _startup_failure(job_id, attempt, limit, settings, not_started or set())
        elif limit is not None and now_s - alive > limit:
            failure = f"hung: no progress for {limit:.0f}s"
        if failure is None:
            continue
        replica = session.get(Replica, rid)
        assert replica is not None  # read in this transaction
        gangs.record_replica_failure(replica=replica, failure=failure, lost=False, at=now)
        hung.append(replica)
    _store_progress(
        session, {rid: dt.datetime.fromtimestamp(seen, dt.UTC) for rid, seen in stored.items()}
    )
    session.flush()
    # A replica declared hung here no longer runs in SQL: whether its agent still lists it
    # is declared_but_running's to find, in this same pass. Counted as running, it was
    # not looked up, and a gang already torn down (for another replica) was placed again
    # beside it (the 200-job chaos soak of 2026-11-28).
    return Checked(hung, running - {(r.job_id, r.attempt, r.index) for r in hung})


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
    # From the scheduled jobs (few, and indexed by status) to their replicas: not a scan
    # of every replica for the pending ones, on every pass.
    rows = (
        session.execute(
            sa.select(Replica)
            .join(Job, Job.id == Replica.job_id)
            .where(
                Job.status == JobStatus.SCHEDULED,
                Replica.attempt == Job.attempt,
                Replica.status == ReplicaStatus.PENDING,
                Replica.created_at < now - limit,
            )
        )
        .scalars()
        .all()
    )
    lost: list[Replica] = []
    for replica in rows:
        beat = by_node.get(replica.node_id)
        if beat is None:  # lost, or silent: reap_lost_nodes' to settle
            continue
        key = (replica.job_id, replica.attempt, replica.index)
        # Only a beat written once the agent had the whole limit to answer says it did
        # not (`after` bounds when it was written from below; None: unknown).
        if beat.after is None or beat.after < replica.created_at + limit or key in beat.running:
            continue
        if key in beat.exited:  # refused, and the event that said so was lost
            gangs.record_replica_exited(
                session=session,
                job_id=key[0],
                attempt=key[1],
                index=key[2],
                exit_code=beat.exited[key],
                log_tail="",
                at=beat.at,
            )
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


def _settled_by_beat(
    session: Session, rid: int, key: Key, started_at: dt.datetime, beat: nodes.Heartbeat
) -> bool:
    """Settle a running replica whose exit its agent reports only in its heartbeat (or
    that the agent no longer runs); whether it did."""
    if key in beat.exited:
        gangs.record_replica_exited(
            session=session,
            job_id=key[0],
            attempt=key[1],
            index=key[2],
            exit_code=beat.exited[key],
            log_tail="",
            at=beat.at,
        )
        return True
    # Only a beat written well after the spawn says the process is gone: `after`
    # bounds when it was written from below (None: unknown, so no conclusion).
    if (
        key not in beat.running
        and beat.after is not None
        and beat.after > started_at + _SPAWN_SLACK
    ):
        replica = session.get(Replica, rid)
        assert replica is not None  # read in this transaction
        gangs.record_replica_failure(
            replica=replica,
            lost=True,
            at=beat.at,
            failure="lost: its agent no longer runs it (the agent restarted?)",
        )
        return True
    return False


def _store_progress(session: Session, stored: dict[int, dt.datetime]) -> None:
    """Write the new progress times in one batch of updates, not an ORM flush of every
    row; rows this session holds are told the new value too."""
    if not stored:
        return
    table = cast(sa.Table, Replica.__table__)  # a mapped class's table is a Table
    session.execute(
        sa.update(table)
        .where(table.c.id == sa.bindparam("replica_id"))
        .values(progress_at=sa.bindparam("seen_at")),
        [{"replica_id": rid, "seen_at": at} for rid, at in stored.items()],
    )
    for rid, at in stored.items():
        held = session.identity_map.get(identity_key(Replica, rid))
        if isinstance(held, Replica):
            set_committed_value(held, "progress_at", at)


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
