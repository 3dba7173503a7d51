"""Following a job: its status changes, metric points and log lines in the one order they
were stored (services/telemetry/stream_order.py), history and live alike, ending with its
terminal status; and a project's status changes.

Every event carries the cursor after it, `<metric id>.<log id>.<job event id>` (SQL ids),
so a client that comes back with it gets exactly the events after it, in the same order. A
follower reads SQL after its cursor, then the job's live feed in Redis
(services/telemetry/live.py, entries as services/wire/feed.py defines them) from its own
position, through the one reader its process shares (services/telemetry/feed_hub.py): a
slow follower holds up nobody, neither other followers nor the ingest. The feed position
is taken *before* the history is read, and items are filtered by id, so nothing committed
in between is lost or sent twice. Each feed entry says where its rows stand (the job's
newest rows of each kind and status change before them): a follower that has had exactly
those sends the rows as they are; one that has not (an entry lost with a Redis restart, a
status change not sent yet) reads what comes before them from SQL first. Status changes
are found by a shared poll of the job (once per STATUS_POLL s per process), and read from
SQL with the rows around them. A lost entry with none after it is found once the feed has
been quiet a while.

The terminal status is held until the job is settled (services/telemetry/settling.py: its
replicas are done and the ingest has stored what they shipped), then sent after the last
rows; the follow ends there. Other changes of the job (its place in the queue, its
replicas) come as `job` events without an id: they are not part of the order.

No transport here: api/routes/streams.py frames what `follow` yields as Server-Sent Events;
the SQL reads every follower of a process shares are services/telemetry/shared_reads.py's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Collection
from contextlib import aclosing
from typing import Any

import anyio
import redis

from services.settings import get_settings
from services.statuses import TERMINAL_STATUSES, JobStatus
from services.telemetry.cursor import Cursor, Event, decoded, place_bound
from services.telemetry.feed_hub import Entry, Subscription, feed_hub
from services.telemetry.settling import Settling
from services.telemetry.shared_reads import (
    KEEPALIVE,
    STATUS_POLL,
    EveryJob,
    PerJob,
    sql_in_thread,
)
from services.telemetry.stream_order import (
    Item,
    StatusChange,
    in_order,
    read_segment,
    terminal_change,
)
from services.telemetry.stream_state import job_fingerprints, job_snapshot, jobs_newest_ids
from services.wire.client import get_redis
from services.wire.feed import FeedEntry, FeedError
from services.wire.keys import live_key

log = logging.getLogger("cohort.follow")

KINDS = ("status", "metric", "log")
ROW_KINDS = ("metric", "log")
# Seconds a finished job's stream waits for it to settle (its replicas' exits, the ingest)
# before it sends the terminal status after what SQL has: a silent node holds none open.
SETTLE_LIMIT = 60.0
FEED_READ = 200  # feed entries per XREAD


def _raise_if_cancelled() -> None:
    """End the follow if its task was asked to stop while Redis answered.

    redis-py's asyncio client can swallow a task's cancellation that lands while it reads
    a reply (redis-py issue #2028): the task then follows on forever. asyncio still counts
    the request (`Task.cancelling()`), so the loop ends at its next turn instead.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


_snapshot = PerJob(job_snapshot)  # (the job as JSON, its newest event id, a fingerprint)
# Per event loop (a read in flight is a task of the loop that started it), per read.
_every_job: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Any, EveryJob]] = (
    weakref.WeakKeyDictionary()
)


async def _every_job_read(read: Callable[[list[int]], dict[int, Any]], job_id: int) -> Any:
    """`read`'s answer for the job, read once a STATUS_POLL for every job followed in
    this process: the fingerprints (status checks) and the newest row ids (a quiet feed's
    check; read per job, they were 50 transactions a second with 50 jobs followed, most
    of the api's CPU with 1000 streams open)."""
    reads = _every_job.setdefault(asyncio.get_running_loop(), {})
    every = reads.get(read) or reads.setdefault(read, EveryJob(read))
    return await every(job_id)


@functools.lru_cache(maxsize=4)
def _redis(url: str) -> redis.Redis:
    """The process's client for the settle checks (blocking calls, run in threads)."""
    return get_redis(url)


class _Follower:
    """One client's follow of one job: its cursor, feed position and timers."""

    def __init__(self, job_id: int, cursor: Cursor, kinds: Collection[str]) -> None:
        self.job_id, self.cursor = job_id, cursor
        self.kinds = frozenset(kinds)
        self.status = "status" in kinds
        self.row_kinds = [kind for kind in ROW_KINDS if kind in kinds]
        self.key = live_key(job_id)
        # The job's feed from now on; None for a follower of statuses alone.
        self.feed: Subscription | None = None
        self.fingerprint: tuple[Any, ...] = ()
        self.terminal: StatusChange | None = None  # held until the job settles
        self.settling: Settling | None = None
        self.settle_by = 0.0
        self.next_status = self.next_check = self.fed_at = time.monotonic()

    async def _events(self, items: list[Item]) -> list[Event]:
        """Stream events of merged items; a status change's data is the job's view
        (read once for the batch) with the change."""
        snapshot: dict[str, Any] = {}
        if any(kind == "status" for kind, _, _ in items):
            snapshot = (await _snapshot(self.job_id))[0]
        return [
            Event(kind, event_id, item.event_data(snapshot) if kind == "status" else item)
            for kind, item, event_id in items
        ]

    async def fromsql_in_thread(self, bound: Cursor | None = None) -> list[Event]:
        """What SQL holds after the cursor (up to `bound`), in stream order."""
        items: list[Item] = []
        while True:
            segment = await sql_in_thread(read_segment, self.job_id, self.cursor, self.kinds, bound)
            got = in_order(segment, self.cursor, self.kinds)
            items += got
            if not got or all(segment.complete.values()):
                break
        return await self._events(items)

    async def start(self) -> AsyncIterator[list[Event]]:
        """What SQL holds after the cursor; nothing if the client has the terminal status."""
        # Taken before the history is read: whatever commits after that read is on the
        # feed after this position.
        if self.row_kinds:
            self.feed = await feed_hub().subscribe(self.key)
        _, _, self.fingerprint = await _snapshot(self.job_id)
        self.terminal = await sql_in_thread(terminal_change, self.job_id)
        # (Only a follower of statuses has had the terminal status: for the others the
        # event part of an id is where the rows stand, which can be past it.)
        if self.terminal is not None and self.status and self.cursor.event >= self.terminal.id:
            self.settle_by = -1.0  # had it all: the follow ends at once
            return
        events = await self.fromsql_in_thread()
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
            if not shared.entry.rows:
                continue
            if self._caught_up(shared.entry):
                self._align(shared.entry)
                events += shared.events_for(self.cursor)
            else:
                # Something stored before these rows has not been sent (a lost entry, a
                # status change): SQL, in order, up to and with these rows.
                events += await self.fromsql_in_thread(place_bound(shared.entry))
        return events

    def _caught_up(self, entry: FeedEntry) -> bool:
        """Whether the follower has had everything stored before the entry's rows."""
        bound = place_bound(entry)
        if bound is None or self.cursor.at(entry.kind) < entry.place.prev:
            return False
        other = "log" if entry.kind == "metric" else "metric"
        return (other not in self.kinds or self.cursor.at(other) >= bound.at(other)) and (
            not self.status or self.cursor.event >= bound.event
        )

    def _align(self, entry: FeedEntry) -> None:
        """Take the entry's place for the kinds this follower does not follow: its ids are
        then the stream's positions, the same for every caught-up follower of the job (who
        share the entry's events), whatever kinds each follows."""
        other = "log" if entry.kind == "metric" else "metric"
        if other not in self.kinds:
            self.cursor.move(other, max(self.cursor.at(other), entry.place.other))
        if not self.status:
            self.cursor.event = max(self.cursor.event, entry.place.event)

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
        newest = await _every_job_read(jobs_newest_ids, self.job_id)
        if any(newest[kind] > self.cursor.at(kind) for kind in self.row_kinds):
            return await self.fromsql_in_thread()
        return []

    async def status_changed(self) -> list[Event]:
        """Status changes stored since the last check (from SQL, in order with the rows
        around them), or a `job` event when only the job's place in the queue or its
        replicas changed. Checked every STATUS_POLL s."""
        if time.monotonic() < self.next_status:
            return []
        self.next_status = time.monotonic() + STATUS_POLL
        # The fingerprints of every followed job in one read; the snapshot (a dozen
        # queries and the view) only of a job that changed.
        fingerprint = await _every_job_read(job_fingerprints, self.job_id)
        changed, self.fingerprint = fingerprint != self.fingerprint, fingerprint
        if not fingerprint:  # the job was deleted: nothing more will come
            self.settle_by = -1.0
            return []
        if self.terminal is None and JobStatus(fingerprint[0]) in TERMINAL_STATUSES:
            self.terminal = await sql_in_thread(terminal_change, self.job_id)
        events: list[Event] = []
        # A status change not sent yet, also when the job looks as at the last check: a
        # change can wait in SQL for rows stored just before it (stream_order.in_order).
        # The held terminal status is sent by `settle`, with what comes before it.
        unsent = fingerprint[4] > self.cursor.event and (
            self.terminal is None or fingerprint[4] != self.terminal.id or changed
        )
        if self.status and unsent:
            events = await self.fromsql_in_thread()
        # Not once the job is terminal: its status is told by the last event alone.
        if self.status and changed and self.terminal is None and not events:
            snapshot = (await _snapshot(self.job_id))[0]
            events.append(Event("job", None, snapshot))
        return events

    async def settle(self) -> tuple[list[Event], bool]:
        """Once the job is terminal: whether it has settled; then its last rows and the
        terminal status (the follow ends after them)."""
        if self.terminal is None:
            return [], False
        if self.settling is None:
            self.settling, self.settle_by = Settling(), time.monotonic() + SETTLE_LIMIT
        if self.settle_by >= 0 and time.monotonic() < self.settle_by:
            client = _redis(get_settings().redis_url)
            try:
                done = await sql_in_thread(self.settling.settled, self.job_id, client)
            except redis.RedisError:
                log.warning("job %s: cannot see the ingest; waiting", self.job_id)
                done = False
            if not done:
                return [], False
        else:
            log.warning(
                "job %s: not settled after %.0fs; ending its stream with what SQL has",
                self.job_id,
                SETTLE_LIMIT,
            )
        events = await self.fromsql_in_thread()
        # Whatever the kinds followed: the terminal status says the stream is over.
        self.cursor.event = self.terminal.id
        events += await self._events([("status", self.terminal, str(self.cursor))])
        return events, True

    async def moved(self) -> list[Event]:
        """What the next entries (waited for) and the job's changes since bring."""
        entries = await self.next_entries()
        _raise_if_cancelled()
        events = await self.fed(entries)
        events += await self.unfed()
        events += await self.status_changed()
        return events

    async def run(self, keepalive: float) -> AsyncGenerator[list[Event]]:
        async for events in self.start():
            yield events
        if self.settle_by < 0:
            return
        wait = self.terminal is None  # finished before the follow began: settle at once
        idle_since = time.monotonic()
        while True:
            events = await self.moved() if wait else []
            wait = True
            last, done = await self.settle() if self.settle_by >= 0 else ([], True)
            events += last
            if events:
                idle_since = time.monotonic()
                yield events
            elif time.monotonic() - idle_since >= keepalive:
                idle_since = time.monotonic()
                yield []
            if done:
                return


def stream_over(job_id: int, cursor: Cursor) -> bool:
    """Whether a follower of statuses at `cursor` has had the job's terminal status: its
    stream is over (blocking: one short SQL read)."""
    terminal = terminal_change(job_id)
    return terminal is not None and cursor.event >= terminal.id


async def follow(
    job_id: int,
    cursor: Cursor | None = None,
    kinds: Collection[str] = KINDS,
    *,
    keepalive: float = KEEPALIVE,
) -> AsyncGenerator[list[Event]]:
    """Follow job `job_id` from `cursor` (None: from the start) until its terminal status:
    batches of events in stream order, each batch what to send at once; an empty batch
    after `keepalive` seconds of silence. `kinds`: some of status, metric, log."""
    start = dataclasses.replace(cursor) if cursor is not None else Cursor()
    follower = _Follower(job_id, start, kinds)
    try:
        async with aclosing(follower.run(keepalive)) as batches:
            async for events in batches:
                yield events
    finally:
        if follower.feed is not None:
            follower.feed.close()
