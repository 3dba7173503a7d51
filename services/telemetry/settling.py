"""When a finished job will have no more metric points or log lines: the rule that lets
its stream send the terminal status last and end.

A job's status turns terminal when the control plane decides it (the chief's exit, a
failure, a cancel, a deadline), which can be before its replicas' last points and lines
are stored: the agent ships them before it reports a replica's exit (workers/node/supervision.py:
the log shipper's and the sidecars' `finish` come first), but the leader's ingest stores
them in its own time (the leader holds an exit for the metric stream's ingest, at most
a few seconds: workers/control/ingest.py points_stored_so_far; not for the log stream's).
So the job is *settled* when

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
from typing import Any

import redis

from services.db import session_scope
from services.jobs import store
from services.models import Job
from services.statuses import TERMINAL_REPLICA_STATUSES
from services.wire.keys import LEADER_GROUP, LOGS_STREAM, METRICS_STREAM

INGESTED_STREAMS = (METRICS_STREAM, LOGS_STREAM)


def replicas_done(job_id: int) -> bool:
    """In its own transaction: every replica of the job's current attempt is done."""
    with session_scope() as session:
        job = session.get(Job, job_id)
        if job is None:
            return True
        replicas = store.read_current_replicas(session=session, jobs=[job])[job_id]
        return all(r.status in TERMINAL_REPLICA_STATUSES for r in replicas)


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
            if not replicas_done(job_id):
                return False
            self.ends = stream_ends(client)
        return ingested_through(client, self.ends)
