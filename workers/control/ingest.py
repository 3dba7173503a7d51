"""The leader's ingest: metric batches and log lines from Redis streams into SQL.

Both feeds work alike: read a batch through the scheduler's consumer group (its own
unacknowledged entries first, after a crash: workers/control/streams.py), store each row
once in SQL, commit, then publish the new rows to the job's live feed
(services/telemetry/live.py) for SSE clients, and only then acknowledge the entries. A
crash anywhere re-reads them, and the unique keys store each point or line once.

The two feeds store and publish one commit at a time (`_ONE_ORDER`): a job's stream is one
order of its points, lines and status changes (services/telemetry/stream_order.py), and
each commit's place in it (the job's newest row of the other kind and status change,
recorded on the lines and on the feed entry) is exact only if no other commit of the job's
rows lands between its reads and its commit. Status changes of the batch's jobs wait for
the commit, and it for them, on the jobs' row locks (metrics.current_attempts).
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

from services.cluster.fencing import Fenced
from services.db import Sessions
from services.jobs.stream_marks import Table, newest_rows
from services.models import JobEvent, LogLine, MetricPoint
from services.telemetry import live, logs, metrics, settling
from services.wire.feed import Place
from services.wire.keys import LOGS_STREAM, METRICS_STREAM
from workers.control.streams import GroupReader
from workers.control.term import Term

log = logging.getLogger("cohort.ingest")

# How long the leader holds a replica's exit for the points shipped before it
# (points_stored_so_far): the ingest's lag, milliseconds unless it is far behind.
POINTS_BEFORE_EXIT = 2.0


@dataclass(frozen=True)
class Feed:
    """One stream the leader stores: how to parse an entry and how to store rows."""

    stream: str
    kind: str  # the live-feed event kind
    parse: Callable[[str], list[Any]]  # the entry's rows, as `store` takes them
    # (session=, rows=) -> the new rows in id order, each (job id, *the feed row)
    store: Callable[..., list[tuple[Any, ...]]]
    table: Table  # where `store` puts the rows
    other: Table  # the other feed's: each commit's place names its newest row there
    count: int  # entries per read


METRICS = Feed(
    METRICS_STREAM,
    "metric",
    metrics.parse_rows,
    metrics.insert_point_rows,
    MetricPoint,
    LogLine,
    1000,
)
LOGS = Feed(
    LOGS_STREAM, "log", logs.parse_log_batch, logs.insert_line_rows, LogLine, MetricPoint, 500
)


def publish_live(
    client: redis.Redis, kind: str, rows: list[tuple[Any, ...]], places: dict[int, Place]
) -> None:
    """Publish committed rows to the live feeds; a failure costs live viewers only."""
    try:
        live.publish(client, kind, rows, places)
    except redis.RedisError as exc:
        # SQL holds the rows: readers fetch them from there when the next entry's `prev`
        # shows they were missed, or when they reconnect.
        log.warning("could not publish %d %s rows to live feeds: %s", len(rows), kind, exc)


def _store(
    feed: Feed, rows: list[Any], sessions: Sessions
) -> tuple[list[tuple[Any, ...]], dict[int, Place]]:
    """Store rows; returns the new ones and, per job, where they stand in its stream."""
    session: Session
    with sessions() as session:
        new_rows = feed.store(session=session, rows=rows)
        # In id order, so each job's first row seen is its lowest id.
        first: dict[int, int] = {}
        for row in new_rows:
            first.setdefault(row[0], row[1])
        # One statement for every job of the read and all three kinds (not a round trip
        # per job or kind); the jobs' rows are locked (feed.store): no status change of
        # them lands meanwhile.
        marks = newest_rows(
            session, first, ((feed.table, True), (feed.other, False), (JobEvent, False))
        )
        return new_rows, {job: Place(*marks[job]) for job in first}


def ingest_once(
    client: redis.Redis,
    feed: Feed,
    *,
    sessions: Sessions,
    block_ms: int = 1000,
    reader: GroupReader | None = None,
) -> int:
    """Store one read of `feed` in SQL, then acknowledge it; returns the rows stored.

    `sessions` opens each transaction: the leader's term's `Fence.scope`, so a deposed
    leader stores nothing (tests and benchmarks of the ingest alone pass
    `services.db.session_scope`, with no leader to fence). `reader`: the term's reader of
    the feed, kept from read to read so the consumer group is made once, not per read
    (every read asks for the pending entries first: workers/control/streams.py).

    Raises:
        Fenced: a newer leader took over; nothing of the read was stored, published or
            acknowledged.
    """
    reader = reader or GroupReader(client, feed.stream, feed.count)
    stored = 0
    for entries in reader.batches(block_ms):
        rows = []
        for _entry_id, fields in entries:
            try:
                rows.extend(feed.parse(fields.get("data", "{}")))
            except (ValueError, KeyError, TypeError):
                log.warning("dropping malformed %s batch %r", feed.kind, str(fields)[:200])
        with _ONE_ORDER:
            new_rows, places = _store(feed, rows, sessions)
            # After the commit, so a live viewer never sees a row SQL could still lose;
            # before the other feed's next commit, so each job's feed is in stream order.
            publish_live(client, feed.kind, new_rows, places)
        stored += len(new_rows)
        reader.ack(*[entry_id for entry_id, _ in entries])
    return stored


def points_stored_so_far(client: redis.Redis, timeout: float, poll: float = 0.005) -> bool:
    """Wait until the ingest has stored every metric batch appended so far; False if
    `timeout` passed first (the ingest far behind, or not running).

    The leader calls it before it applies a replica's exit: the agent ships the replica's
    last points before it reports the exit (workers/node/supervision.py), and once the
    exit is applied a next attempt may start (a drained gang moved, a failed one
    restarted), whose start makes the ingest refuse the old attempt's points
    (services/telemetry/metrics.py). Without the wait a point of the last step before
    the exit was lost whenever the ingest's commit came after the attempt's."""
    ends = settling.stream_ends(client, (METRICS_STREAM,))
    deadline = time.monotonic() + timeout
    while not settling.ingested_through(client, ends):
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll)
    return True


def points_first(client: redis.Redis, timeout: float, exits: str) -> None:
    """Before the leader applies `exits` (what they are, for the warning): wait, at most
    `timeout`, for the points shipped before them to be stored (points_stored_so_far)."""
    if not points_stored_so_far(client, timeout):
        log.warning(
            "applying %s with the metrics ingest over %.1fs behind: their last points may "
            "be refused as an old attempt's",
            exits,
            timeout,
        )


# Points and lines are stored and published one commit at a time (see the module's
# docstring): the two feeds' threads take turns here.
_ONE_ORDER = threading.Lock()


# One ingester per feed in a process. A leader starved of CPU can lose its lock and win
# it back while the last term's ingest thread is still inside a long statement: a second
# thread would read the same pending entries as it (one consumer name) and wait on its
# locks until that statement ends (its term's fence then refuses it).
_INGESTING = {feed.stream: threading.Lock() for feed in (METRICS, LOGS)}


def ingest_while(client: redis.Redis, feed: Feed, term: Term) -> None:
    """Ingest `feed` through the term's fence until the term ends, unless another thread
    of this process already does (then wait for it to end, or for the term to end)."""
    running = _INGESTING.setdefault(feed.stream, threading.Lock())
    while term.leading.is_set():
        if running.acquire(timeout=1.0):
            break
    else:
        return
    reader = GroupReader(client, feed.stream, feed.count)
    try:
        while term.leading.is_set():
            try:
                ingest_once(client, feed, sessions=term.fence.scope, block_ms=500, reader=reader)
            except Fenced as exc:  # the entries stay pending for the newer leader
                term.step_down(str(exc))
            except Exception:
                log.exception("%s ingest failed; retrying", feed.kind)
                time.sleep(1.0)
    finally:
        running.release()
