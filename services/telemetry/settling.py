"""When a finished job will have no more metric points or log lines: the rule that lets
its stream send the terminal status last and end.

A job's status turns terminal when the control plane decides it (the chief's exit, a
failure, a cancel, a deadline), which can be before its replicas' last points and lines
are stored: the agent ships them before it reports a replica's exit (workers/node/supervision.py:
the log shipper's and the sidecars' `finish` come first), but the leader's ingest stores
them in its own time (the leader holds an exit for the metric stream's ingest, at most
a few seconds: workers/control/ingest.py points_stored_so_far; not for the log stream's).
So the job is *settled* when

0. it never left the queue (cancelled or expired there): it never had a replica, so
   nothing was shipped and nothing is waited for, neither Redis nor the ingest (a follow
   of a job cancelled while queued waited for the ingest's backlog of other jobs); or
1. every replica of its current attempt has a terminal replica status (its exit was
   reported, it was stopped, or its node was lost), and then
2. the leader's ingest has stored everything appended to the metric and log streams up
   to that moment: its consumer group has been handed every entry up to the streams'
   last ids as they were then, and has acknowledged them (it acknowledges after the
   commit and the live-feed publish, workers/control/ingest.py).

What a replica appends after its exit was reported (a node cut off from the control plane
that comes back) is stored but not streamed: `GET /jobs/{id}/logs` and `/metrics` have it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

import redis
import sqlalchemy as sa

from services.db import session_scope
from services.jobs import store
from services.models import Job, JobEvent
from services.statuses import TERMINAL_REPLICA_STATUSES, JobStatus
from services.wire.keys import LEADER_GROUP, LOGS_STREAM, METRICS_STREAM

INGESTED_STREAMS = (METRICS_STREAM, LOGS_STREAM)


class Shipping(Enum):
    """What a job's replicas may still ship to the ingested streams."""

    NEVER = "never"  # no replica was ever placed (or the job is gone): nothing to store
    RUNNING = "running"  # a replica of its current attempt is not done yet
    DONE = "done"  # every replica of its current attempt is done


def shipping(job_id: int) -> Shipping:
    """In its own transaction: where the job's replicas stand."""
    with session_scope() as session:
        job = session.get(Job, job_id)
        if job is None:
            return Shipping.NEVER
        replicas = store.read_current_replicas(session=session, jobs=[job])[job_id]
        if any(r.status not in TERMINAL_REPLICA_STATUSES for r in replicas):
            return Shipping.RUNNING
        # A gang is placed as its job leaves the queue (queued -> scheduled): a job that
        # never took that edge never had a replica. (The current attempt's gang may not be
        # placed yet while an earlier one's shipped points.)
        placed = bool(replicas) or session.scalar(
            sa.select(
                sa.exists().where(
                    JobEvent.job_id == job_id, JobEvent.to_status == JobStatus.SCHEDULED
                )
            )
        )
        return Shipping.DONE if placed else Shipping.NEVER


def _order(entry_id: str) -> tuple[int, int]:
    ms, _, seq = str(entry_id).partition("-")
    return int(ms), int(seq or 0)


def stream_ends(client: redis.Redis, streams: tuple[str, ...] = INGESTED_STREAMS) -> dict[str, str]:
    """The `streams`' last entry ids now (a stream that does not exist: none)."""
    ends = {}
    for stream in streams:
        try:
            info: Any = client.xinfo_stream(stream)
        except redis.ResponseError:  # no such stream: nothing to wait for
            continue
        ends[stream] = str(info["last-generated-id"])
    return ends


def ingested_through(client: redis.Redis, ends: dict[str, str]) -> bool:
    """Whether the leader's ingest has stored every entry up to `ends` (stream_ends)."""
    for stream, end in ends.items():
        try:
            groups: Any = client.xinfo_groups(stream)
        except redis.ResponseError:  # the stream is gone (Redis lost it): nothing to store
            continue
        group = next((g for g in groups if g["name"] == LEADER_GROUP), None)
        if group is None or _order(group["last-delivered-id"]) < _order(end):
            return False
        if int(group["pending"]):
            summary: Any = client.xpending(stream, LEADER_GROUP)
            if summary["min"] is not None and _order(summary["min"]) <= _order(end):
                return False
    return True


@dataclass
class Settling:
    """One follower's wait for its finished job to settle (checked every poll)."""

    ends: dict[str, str] | None = None  # taken once the replicas are done

    def settled(self, job_id: int, client: redis.Redis) -> bool:
        """Check once (blocking: run it off the event loop)."""
        if self.ends is None:
            state = shipping(job_id)
            if state is Shipping.NEVER:
                return True
            if state is Shipping.RUNNING:
                return False
            self.ends = stream_ends(client)
        return ingested_through(client, self.ends)
