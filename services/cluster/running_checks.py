"""Every running replica, checked in each pass against its agent's heartbeat, its
progress beats and its limits (watchdog.py's docstring says what each finding means):

* an exit the agent reports only in its heartbeat is recorded; a replica the agent no
  longer runs is lost;
* a replica without a first sign of progress within STARTUP_TIMEOUT, or without one
  for its limit (the job's own, else PROGRESS_TIMEOUT), is hung and fails.

What counts as progress: a training step or metric point, a file written under the
checkpoint or model directory (the agent's progress beats), and the replica's output once
every replica of its gang has started. Output alone before that is no sign: TensorFlow
keeps logging while a gang waits for a peer that never joins, so a gang that never forms
is still caught at STARTUP_TIMEOUT; once it has formed, a script that prints its epochs
and nothing else is alive, and a replica stuck with every peer alive goes silent (its
peers wait in the collective, silent too) and is caught at its limit.

A busy cluster runs thousands of replicas: they are read once as a few columns and
judged in plain numbers; rows are loaded only for what changes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any, NamedTuple, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.orm.util import identity_key

from services.cluster import gangs, nodes
from services.cluster.hang_reasons import SIGNS, hang_limit, startup_failure
from services.db import read_rows
from services.models import Job, Replica
from services.settings import Settings
from services.statuses import ReplicaStatus

Key = tuple[int, int, int]

# A heartbeat must be this much newer than a replica's spawn before its absence
# from the agent's list means the process is gone (the list is read at beat time).
_SPAWN_SLACK = dt.timedelta(seconds=3)


# How far SQL's copy of a running replica's progress may lag the beats the pass reads
# (the pass judges by the newer of the two). It is there for the next leader, whose
# first pass excuses the silence anyway (excuse_silence): a row is rewritten at most
# every this often, not on every beat of every replica.
PROGRESS_STORE_EVERY = dt.timedelta(seconds=30)


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
    output: dict[Key, float] | None = None,
) -> Checked:
    """Every running replica, read once as a few columns, checked in turn against:

    * its agent's heartbeat: an exit the agent reports only there is recorded; a replica
      the agent no longer runs is lost;
    * its progress: `progress` gives the time (the control plane's clock, arrivals.py)
      each replica is alive through, `output` when its output last grew (progress too
      once every replica of its gang has started); SQL keeps it coarsely
      (PROGRESS_STORE_EVERY);
    * its limits: a replica without progress for its limit, or without a first step
      within STARTUP_TIMEOUT, is hung and fails.

    Returns the hung replicas, and the keys of every replica read as running and not
    declared hung here.
    """
    check = _Check(session, settings, heartbeats, progress, now, output or {})
    hung: list[Replica] = []
    for row in read_rows(session, _RUNNING):
        failure = check.judge(row)
        if failure is None:
            continue
        replica = session.get(Replica, row.id)
        assert replica is not None  # read in this transaction
        gangs.record_replica_failure(replica=replica, failure=failure, lost=False, at=now)
        hung.append(replica)
    _store_progress(
        session,
        {rid: dt.datetime.fromtimestamp(seen, dt.UTC) for rid, seen in check.stored.items()},
    )
    session.flush()
    # A replica declared hung here no longer runs in SQL: whether its agent still lists it
    # is declared_but_running's to find, in this same pass. Counted as running, it was
    # not looked up, and a gang already torn down (for another replica) was placed again
    # beside it (the 200-job chaos soak of 2026-11-28).
    return Checked(hung, check.running - {(r.job_id, r.attempt, r.index) for r in hung})


# What the check reads of each running replica and its job.
_RUNNING = (
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
    .where(Replica.status == ReplicaStatus.RUNNING)
)


class _Check:
    """One check of the running replicas: what it knows of the beats, and what it
    learns row by row. Times are unix seconds: a datetime and a timedelta per row per
    comparison were most of the check's cost."""

    def __init__(
        self,
        session: Session,
        settings: Settings,
        heartbeats: list[nodes.Heartbeat],
        progress: dict[Key, float],
        now: dt.datetime,
        output: dict[Key, float],
    ) -> None:
        self.session = session
        self.output = output
        self.settings = settings
        self.by_node = {beat.node_id: beat for beat in heartbeats}
        self.progress = progress
        self.now_s = now.timestamp()
        self.store_every = PROGRESS_STORE_EVERY.total_seconds()
        self.running: set[Key] = set()  # every replica judged
        self.stored: dict[int, float] = {}  # replica id -> a newer progress time to store
        self.limits: dict[int | None, float | None] = {}  # by the job's own timeout
        self.not_started: set[tuple[int, int]] | None = None  # read when first needed

    def judge(self, row: Sequence[Any]) -> str | None:
        """Why the replica of a row of _RUNNING fails, if it does; an exit or a loss its
        agent's beat shows is recorded here, and a newer progress time noted."""
        (
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
        ) = row
        key = (job_id, attempt, index)
        self.running.add(key)
        beat = self.by_node.get(node_id)
        # (Most replicas are in their agent's list and not among its exits.)
        if (
            beat is not None
            and started_at is not None
            and (key in beat.exited or key not in beat.running)
            and _settled_by_beat(self.session, rid, key, started_at, beat)
        ):
            return None
        alive = None if progress_at is None else progress_at.timestamp()
        seen = self.progress.get(key)
        stepped = seen is not None  # a step, metric or file: more than output
        spoke = self.output.get(key)
        if spoke is not None and (seen is None or spoke > seen) and self._formed(job_id, attempt):
            seen = spoke  # output is progress once the whole gang has started
        if seen is not None:
            if alive is None or seen - alive > self.store_every:
                self.stored[rid] = seen
            if alive is None or seen > alive:
                alive = seen  # judged by the newest beat, stored or not
        if started_at is None or not _watched(role, strategy):
            return None
        if beat is not None and self.now_s - beat.at.timestamp() > self.settings.AGENT_LEASE:
            # Its node has not been heard from for longer than its agent's lease: the
            # agent's replicas stop themselves by then (workers/node/lease.py), so their
            # silence is the node's, which reap_lost_nodes settles at NODE_TIMEOUT. Judged
            # hung first, the gang would be placed again on that silent node.
            return None
        started_s = started_at.timestamp()
        return self._hung(job_id, attempt, started_s, alive, stepped, job_timeout)

    def _hung(
        self,
        job_id: int,
        attempt: int,
        started_s: float,
        alive: float | None,
        stepped: bool,
        job_timeout: int | None,
    ) -> str | None:
        """Why a watched, started replica is hung, if it is. Until its first step (or
        metric, or file) a replica has STARTUP_TIMEOUT from its start whatever it printed:
        output extends the start-up, never shortens it to the progress limit (a chief
        that prints, then restores a checkpoint in silence, is setting up, not hung)."""
        if job_timeout not in self.limits:  # a few distinct values among thousands of rows
            self.limits[job_timeout] = hang_limit(job_timeout, self.settings.PROGRESS_TIMEOUT)
        limit = self.limits[job_timeout]
        startup_end = started_s + self.settings.STARTUP_TIMEOUT
        if alive is None or not stepped:
            if self.now_s <= startup_end:
                return None
            if alive is None or limit is None or alive + limit <= startup_end:
                # Nothing, or output gone quiet before the start-up limit: that limit ran out.
                return startup_failure(limit, self.settings, self._formed(job_id, attempt))
        if limit is not None and self.now_s - alive > limit:
            return f"hung: no progress for {limit:.0f}s: {SIGNS}"
        return None

    def _formed(self, job_id: int, attempt: int) -> bool:
        """Whether every replica of the gang has started (none still pending)."""
        if self.not_started is None:  # one query a pass, and only when needed
            self.not_started = _gangs_not_started(self.session)
        return (job_id, attempt) not in self.not_started


def _watched(role: str, strategy: str) -> bool:
    """Whether a running replica runs a training loop, so beats progress: every replica
    of the all-worker strategies; of a parameter_server gang, the chief alone."""
    return strategy != "parameter_server" or role == "chief"


# ----
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


def record_beat_exit(session: Session, key: Key, beat: nodes.Heartbeat) -> None:
    """Record the exit of a replica that its agent's beat lists among its exits."""
    gangs.record_replica_exited(
        session=session,
        job_id=key[0],
        attempt=key[1],
        index=key[2],
        exit_code=beat.exited[key],
        log_tail="",
        at=beat.at,
    )


def _settled_by_beat(
    session: Session, rid: int, key: Key, started_at: dt.datetime, beat: nodes.Heartbeat
) -> bool:
    """Settle a running replica whose exit its agent reports only in its heartbeat (or
    that the agent no longer runs); whether it did."""
    if key in beat.exited:
        record_beat_exit(session, key, beat)
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
