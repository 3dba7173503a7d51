"""Where a follower of a job's stream is, and the events that move it on.

A follower's cursor is the last metric point, log line and job event it was sent (SQL
ids); every event carries the cursor after it as its id, `<metric>.<log>.<event>`, so a
client that comes back with that id gets exactly what it missed. Feed entries are decoded
once per process, and their events made once for every follower that is caught up.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, NamedTuple

from cachetools import FIFOCache

from services.exceptions import InvalidEventId
from services.wire.feed import FeedEntry, Row


@dataclass
class Cursor:
    """What a client has seen: the last metric, log line and job event ids."""

    metric: int = 0
    log: int = 0
    event: int = 0

    def __str__(self) -> str:
        return f"{self.metric}.{self.log}.{self.event}"

    def at(self, kind: str) -> int:
        """The id of the last `metric` or `log` row sent."""
        return self.metric if kind == "metric" else self.log

    def move(self, kind: str, row_id: int) -> None:
        if kind == "metric":
            self.metric = row_id
        else:
            self.log = row_id

    @classmethod
    def parse(cls, raw: str, field: str) -> Cursor:
        """A cursor from an event id this stream sent; `field` names where it came from.

        Raises:
            InvalidEventId: anything else.
        """
        parts = raw.strip().split(".")
        if len(parts) != 3 or not all(_is_id(p) for p in parts):
            raise InvalidEventId(
                field,
                f"{raw[:40]!r} is not an event id of this stream "
                "(three numbers joined by dots); omit it to start from "
                "the beginning",
            )
        return cls(*(int(p) for p in parts))


def _is_id(text: str) -> bool:
    # ASCII digits only: str.isdigit() also accepts '²', which int() refuses.
    return text.isascii() and text.isdigit() and len(text) < 19


def parse_project_position(raw: str | None, field: str = "last-event-id") -> int | None:
    """Where a project stream's client left off (a job-event id), or None.

    Raises:
        InvalidEventId: not an event id of the project stream.
    """
    if raw is None:
        return None
    if not _is_id(raw.strip()):
        raise InvalidEventId(
            field, f"{raw[:40]!r} is not an event id of this stream (a number); omit it"
        )
    return int(raw)


class Event(NamedTuple):
    """One thing to tell a follower."""

    kind: str  # status | metric | log | job
    id: str | None  # the cursor after this event (None: a `job` event, outside the order)
    data: Any  # status: the job (JobRead as JSON); metric / log: a MetricRow / LogRow
    # The same object goes to every follower of the job in this process that is caught
    # up: a transport may encode it once for all of them (by identity).
    shared: bool = False


def row_events(
    kind: str, rows: Collection[Row], cursor: Cursor, shared: bool = False
) -> list[Event]:
    """Events for rows the client has not had yet (ids at or below its cursor were sent
    already: from history, or from an overlapping feed entry); moves the cursor."""
    events = []
    for row in rows:
        if row.id <= cursor.at(kind):
            continue
        cursor.move(kind, row.id)
        events.append(Event(kind, str(cursor), row, shared))
    return events


class SharedEntry:
    """A decoded feed entry and its events, shared by the followers in this process:
    followers that are caught up have the same cursor, so one decoding and one list of
    events serve them all."""

    __slots__ = ("entry", "events", "made_for")

    def __init__(self, entry: FeedEntry) -> None:
        self.entry = entry
        self.events: list[Event] = []
        self.made_for: tuple[int, int] = (-1, -1)  # the cursor's other two parts

    def events_for(self, cursor: Cursor) -> list[Event]:
        """This entry's events for a follower at `cursor` (moved past them)."""
        kind, rows = self.entry.kind, self.entry.rows
        if not rows:
            return []
        mine = cursor.at(kind)
        other = (cursor.at("log" if kind == "metric" else "metric"), cursor.event)
        if mine < rows[0].id and other == self.made_for:
            cursor.move(kind, rows[-1].id)
            return self.events
        whole = mine < rows[0].id  # the whole entry is new to it: its events are shareable
        events = row_events(kind, rows, cursor, shared=whole)
        if whole:
            self.events, self.made_for = events, other
        return events


# Decoded feed entries kept per process, the oldest dropped first. An entry is worth
# keeping only until every caught-up follower of its job has taken it, milliseconds after
# the hub hands it over; a follower further behind reads its entries back and decodes them
# itself. 512 is about a quarter second of 210 jobs' entries at 50,000 points/s. 4,096
# (two seconds of them) held so many rows and events that each full collection of the
# api's cycle collector took 260-340 ms of CPU, with every stream waiting
# (docs/benchmarks.md, "Emit to SSE: the collector's pauses").
SHARED_ENTRIES = 512
_entries: FIFOCache[tuple[int, str], SharedEntry] = FIFOCache(maxsize=SHARED_ENTRIES)


def decoded(job_id: int, entry_id: str, fields: dict[str, Any]) -> SharedEntry:
    """The feed entry `entry_id` of the job, decoded once for every follower.

    Raises:
        FeedError: an entry this contract does not write.
    """
    key = (job_id, entry_id)
    hit = _entries.get(key)
    if hit is None:
        hit = _entries[key] = SharedEntry(FeedEntry.decode(fields))
    return hit


def place_bound(entry: FeedEntry) -> Cursor | None:
    """The stream position after an entry's rows: its rows, and what was stored before
    them (None: an entry of a writer that did not say)."""
    place = entry.place
    if place.other < 0 or place.event < 0:
        return None
    bound = Cursor(event=place.event)
    bound.move(entry.kind, entry.rows[-1].id)
    bound.move("log" if entry.kind == "metric" else "metric", place.other)
    return bound
