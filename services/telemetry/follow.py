"""Following a job: its status, its stored metric points and log lines after a client's
cursor, then its live feed, with no gap and nothing twice; and a project's status changes.

Every event carries the cursor after it, `<metric id>.<log id>.<job event id>` (SQL ids),
so a client that comes back with it gets exactly what it missed. A follower reads SQL
history after its cursor, then the job's live feed in Redis (services/telemetry/live.py,
entries as services/wire/feed.py defines them) from its own position, through the one
reader its process shares (services/telemetry/feed_hub.py): a slow follower holds up
nobody, neither other followers nor the ingest. The feed position is
taken *before* the history is read, and rows are filtered by id, so nothing committed in
between is lost or sent twice. Each feed entry names the newest id stored before its rows
(`prev`): a follower behind it missed an entry (lost with a Redis restart, or a publish
that failed) and reads those rows from SQL before the entry's; a lost entry with none
after it is found once the feed has been quiet a while.

No transport here: api/routes/streams.py frames what `follow` yields as Server-Sent Events.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Collection
from contextlib import aclosing
from typing import Any, TypeVar

import anyio

from services.db import session_scope
from services.telemetry import logs, metrics
from services.telemetry.cursor import Cursor, Event, decoded, row_events
from services.telemetry.feed_hub import Entry, Subscription, feed_hub
from services.telemetry.stream_state import job_snapshot, newest_ids, project_changes
from services.wire.feed import ROW_TYPES, FeedError, Row
from services.wire.keys import live_key

log = logging.getLogger("cohort.follow")

KINDS = ("status", "metric", "log")
ROW_KINDS = ("metric", "log")
PAGE = 5000  # history rows per SQL read
STATUS_POLL = 1.0  # seconds between status checks (statuses change rarely)
KEEPALIVE = 15.0  # seconds of silence before an empty batch (a transport's keep-alive)
FEED_READ = 200  # feed entries per XREAD
T = TypeVar("T")


async def _sql(fn: Callable[..., T], *args: Any) -> T:
    # Sync SQLAlchemy off the event loop; short reads only.
    return await anyio.to_thread.run_sync(fn, *args)


def _raise_if_cancelled() -> None:
    """End the follow if its task was asked to stop while Redis answered.

    redis-py's asyncio client can swallow a task's cancellation that lands while it reads
    a reply (redis-py issue #2028): the task then follows on forever. asyncio still counts
    the request (`Task.cancelling()`), so the loop ends at its next turn instead.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class _PerJob:
    """One SQL read per job per STATUS_POLL s, shared by every follower in this process:
    100 followers of one job cost one read a second, not 100."""

    def __init__(self, read: Callable[[int], Any]) -> None:
        self.read = read
        self.values: dict[int, tuple[float, Any]] = {}

    async def __call__(self, job_id: int) -> Any:
        now = time.monotonic()
        hit = self.values.get(job_id)
        if hit is not None and now - hit[0] < STATUS_POLL:
            return hit[1]
        value = await _sql(self.read, job_id)
        if len(self.values) > 10_000:
            self.values.clear()
        self.values[job_id] = (now, value)
        return value


_snapshot = _PerJob(job_snapshot)  # (the job as JSON, its newest event id, a fingerprint)
_newest = _PerJob(newest_ids)  # the job's newest point and line ids


def _history_page(kind: str, job_id: int, after: int) -> list[Row]:
    read = metrics.read_points_after if kind == "metric" else logs.read_lines_after
    of = ROW_TYPES[kind].of
    with session_scope() as session:
        return [of(row) for row in read(session=session, job_id=job_id, after_id=after,
                                        limit=PAGE)]


async def _stored_after(kind: str, job_id: int, cursor: Cursor,
                        upto: int | None = None) -> AsyncIterator[list[Event]]:
    """Events for the job's stored rows of `kind` after the cursor, from SQL, a page at a
    time, while the cursor is below `upto` (None: up to the newest row). The history a
    client starts with, and rows the live feed did not bring."""
    while upto is None or upto > cursor.at(kind):
        page = await _sql(_history_page, kind, job_id, cursor.at(kind))
        yield row_events(kind, page, cursor)
        if len(page) < PAGE:
            break


class _Follower:
    """One client's follow of one job: its cursor, feed position and timers."""

    def __init__(self, job_id: int, cursor: Cursor, kinds: Collection[str]) -> None:
        self.job_id, self.cursor = job_id, cursor
        self.status = "status" in kinds
        self.row_kinds = [kind for kind in ROW_KINDS if kind in kinds]
        self.key = live_key(job_id)
        # The job's feed from now on; None for a follower of statuses alone.
        self.feed: Subscription | None = None
        self.fingerprint: tuple[Any, ...] = ()
        self.next_status = self.next_check = self.fed_at = time.monotonic()

    async def start(self, resumed: bool) -> AsyncIterator[list[Event]]:
        """The job's status (unless a resuming client has it), then the stored rows."""
        # Taken before the history is read: whatever commits after that read is on the
        # feed after this position.
        if self.row_kinds:
            self.feed = await feed_hub().subscribe(self.key)
        snapshot, event_id, self.fingerprint = await _snapshot(self.job_id)
        if self.status and (not resumed or event_id > self.cursor.event):
            self.cursor.event = max(self.cursor.event, event_id)
            yield [Event("status", str(self.cursor), snapshot)]
        self.cursor.event = max(self.cursor.event, event_id)
        for kind in self.row_kinds:
            async for events in _stored_after(kind, self.job_id, self.cursor):
                if events:
                    yield events
        self.next_status = self.next_check = time.monotonic() + STATUS_POLL
        self.fed_at = time.monotonic()

    async def fed(self, entries: list[Entry]) -> list[Event]:
        """Events of feed entries."""
        events: list[Event] = []
        for entry_id, fields in entries:
            if fields.get("kind") not in self.row_kinds:
                continue
            try:
                shared = decoded(self.job_id, entry_id, fields)
            except FeedError as exc:  # as if lost: its rows come from SQL
                log.warning("job %s: skipping feed entry %s: %s", self.job_id, entry_id, exc)
                continue
            self.fed_at = time.monotonic()
            # Rows stored before this entry's that the client has not had (the feed
            # lost their entry): from SQL first, in id order.
            async for missed in _stored_after(shared.entry.kind, self.job_id, self.cursor,
                                              shared.entry.prev):
                events += missed
            events += shared.events_for(self.cursor)
        return events

    async def next_entries(self) -> list[Entry]:
        """The feed's next entries, waiting up to STATUS_POLL s for some."""
        if self.feed is None:  # statuses only: nothing to wait for but the next check
            await anyio.sleep(STATUS_POLL)
            return []
        return await self.feed.read(FEED_READ, STATUS_POLL)

    async def unfed(self) -> list[Event]:
        """A lost entry with none after it (a job's last batch): once the feed has been
        quiet for a while, SQL says whether anything was stored unsent."""
        now = time.monotonic()
        if not self.row_kinds or now < self.next_check:
            return []
        self.next_check = now + STATUS_POLL
        if now - self.fed_at < STATUS_POLL:
            return []
        newest = await _newest(self.job_id)
        events: list[Event] = []
        for kind in self.row_kinds:
            async for missed in _stored_after(kind, self.job_id, self.cursor, newest[kind]):
                events += missed
        return events

    async def status_changed(self) -> list[Event]:
        """A `status` event when the job's snapshot has changed (checked every STATUS_POLL s)."""
        if not self.status or time.monotonic() < self.next_status:
            return []
        self.next_status = time.monotonic() + STATUS_POLL
        snapshot, event_id, fingerprint = await _snapshot(self.job_id)
        if fingerprint == self.fingerprint:
            return []
        self.fingerprint = fingerprint
        self.cursor.event = max(self.cursor.event, event_id)
        return [Event("status", str(self.cursor), snapshot)]

    async def run(self, resumed: bool, keepalive: float) -> AsyncGenerator[list[Event]]:
        async for events in self.start(resumed):
            yield events
        idle_since = time.monotonic()
        while True:
            entries = await self.next_entries()
            _raise_if_cancelled()
            events = await self.fed(entries)
            events += await self.unfed()
            events += await self.status_changed()
            if events:
                idle_since = time.monotonic()
                yield events
            elif time.monotonic() - idle_since >= keepalive:
                idle_since = time.monotonic()
                yield []


async def follow(job_id: int, cursor: Cursor | None = None, kinds: Collection[str] = KINDS,
                 *, keepalive: float = KEEPALIVE) -> AsyncIterator[list[Event]]:
    """Follow job `job_id` from `cursor` (None: from the start), forever: batches of
    events in order, each batch what to send at once; an empty batch after `keepalive`
    seconds of silence. `kinds`: some of status, metric, log.

    The job's status comes first (unless the cursor has its newest event), then its
    stored rows of each kind after the cursor, then what is stored from now on.
    """
    start = dataclasses.replace(cursor) if cursor is not None else Cursor()
    follower = _Follower(job_id, start, kinds)
    try:
        async with aclosing(follower.run(cursor is not None, keepalive)) as batches:
            async for events in batches:
                yield events
    finally:
        if follower.feed is not None:
            follower.feed.close()


async def follow_project(project_id: int, after: int | None = None
                         ) -> AsyncIterator[list[Event]]:
    """The project's jobs as their statuses change, forever: `status` events whose ids
    are job-event ids. With no `after`, the project's newest jobs come first."""
    cursor = after
    while True:
        changed, cursor = await _sql(project_changes, project_id, cursor)
        if changed:
            yield [Event("status", str(cursor), snapshot) for snapshot in changed]
        await anyio.sleep(STATUS_POLL)
