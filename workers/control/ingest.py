"""The leader's ingest: metric batches and log lines from Redis streams into SQL.

Both feeds work alike: read a batch through the scheduler's consumer group (its own
unacknowledged entries first, after a crash: workers/control/streams.py), store each row
once in SQL, commit, then publish the new rows to the job's live feed
(services/telemetry/live.py) for SSE clients, and only then acknowledge the entries. A
crash anywhere re-reads them, and the unique keys store each point or line once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from sqlalchemy.orm import Session

from services.db import session_scope
from services.telemetry import live, logs, metrics
from services.wire.keys import LOGS_STREAM, METRICS_STREAM
from workers.control.streams import GroupReader

log = logging.getLogger("cohort.ingest")

@dataclass(frozen=True)
class Feed:
    """One stream the leader stores: how to parse an entry and how to store rows."""

    stream: str
    kind: str  # the live-feed event kind
    parse: Callable[[str], list[dict[str, Any]]]
    store: Callable[..., list[dict[str, Any]]]  # (session=, rows=) -> the new rows
    newest: Callable[..., int]  # (session=, job_id=, before=) -> the newest id below
    count: int  # entries per read


METRICS = Feed(METRICS_STREAM, "metric", metrics.parse_batch, metrics.insert_points,
               metrics.newest_point_id, 1000)
LOGS = Feed(LOGS_STREAM, "log", logs.parse_log_batch, logs.insert_lines,
            logs.newest_line_id, 500)


def publish_live(client: redis.Redis, kind: str, rows: list[dict[str, Any]],
                 prev: dict[int, int]) -> None:
    """Publish committed rows to the live feeds; a failure costs live viewers only."""
    try:
        live.publish(client, kind, rows, prev)
    except redis.RedisError as exc:
        # SQL holds the rows: readers fetch them from there when the next entry's `prev`
        # shows they were missed, or when they reconnect.
        log.warning("could not publish %d %s rows to live feeds: %s", len(rows), kind, exc)


def _store(feed: Feed, rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[int, int]]:
    """Store rows; returns the new ones and, per job, the newest id stored before them."""
    session: Session
    with session_scope() as session:
        new_rows = feed.store(session=session, rows=rows)
        first: dict[int, int] = {}
        for row in new_rows:
            first[row["job_id"]] = min(first.get(row["job_id"], row["id"]), row["id"])
        prev = {job_id: feed.newest(session=session, job_id=job_id, before=first_id)
                for job_id, first_id in first.items()}
        return new_rows, prev


def ingest_once(client: redis.Redis, feed: Feed, block_ms: int = 1000) -> int:
    """Store one read of `feed` in SQL, then acknowledge it; returns the rows stored."""
    reader = GroupReader(client, feed.stream, feed.count)
    stored = 0
    for entries in reader.batches(block_ms):
        rows = []
        for _entry_id, fields in entries:
            try:
                rows.extend(feed.parse(fields.get("data", "{}")))
            except (ValueError, KeyError, TypeError):
                log.warning("dropping malformed %s batch %r", feed.kind, str(fields)[:200])
        new_rows, prev = _store(feed, rows)
        stored += len(new_rows)
        # After the commit, so a live viewer never sees a row SQL could still lose.
        publish_live(client, feed.kind, new_rows, prev)
        reader.ack(*[entry_id for entry_id, _ in entries])
    return stored


def ingest_metrics_once(client: redis.Redis, block_ms: int = 1000) -> int:
    """Store one read of metric batches; returns the points stored."""
    return ingest_once(client, METRICS, block_ms)


def ingest_logs_once(client: redis.Redis, block_ms: int = 1000) -> int:
    """Store one read of log batches; returns the lines stored."""
    return ingest_once(client, LOGS, block_ms)


def ingest_while(client: redis.Redis, feed: Feed, leading: threading.Event) -> None:
    """Ingest `feed` until `leading` is cleared."""
    while leading.is_set():
        try:
            ingest_once(client, feed, block_ms=500)
        except Exception:
            log.exception("%s ingest failed; retrying", feed.kind)
            time.sleep(1.0)
