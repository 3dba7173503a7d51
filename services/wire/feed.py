"""The live feed's contract: what the ingest appends to a job's `cohort:live:<job>` stream
after each commit, and what the api's followers read back.

One feed entry holds the rows of one kind that one ingest commit stored for one job, and
where they stand in the job's stream (services/telemetry/stream_order.py): `prev`, the id
of the job's newest row of that kind stored before them, `other`, the job's newest row of
the other kind, and `event`, its newest status change, when they were stored. A reader
that has had exactly those is caught up and sends the rows; one that has not missed
something (an entry lost with a Redis restart) and reads it from SQL first. Rows travel as
positional JSON arrays (a feed holds up to 20,000 entries per job, and every follower of
a job decodes each one), in the field order of `MetricRow` / `LogRow`.

Redis fields: `kind` (`metric` | `log`), `rows` (a JSON array of rows), `prev`, `other`,
`event` (ids; an entry without `other` or `event` is read as one whose place is unknown).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson
from redis.typing import EncodableT, FieldT


class FeedError(ValueError):
    """A feed entry that is not one this contract writes (its rows are read from SQL)."""


def _stored_fields(fields: tuple[str, ...], stored: Any) -> list[Any]:
    """A stored row's values in `fields` order, from a dict or an ORM object."""
    if isinstance(stored, dict):
        return [stored[name] for name in fields]
    return [getattr(stored, name) for name in fields]


def _payload(fields: tuple[str, ...], row: tuple[Any, ...]) -> dict[str, Any]:
    """Every field but the first, the SQL id (a stream event carries it as its id)."""
    return dict(zip(fields[1:], row[1:], strict=True))


class MetricRow(NamedTuple):
    """A stored metric point, with its SQL id."""

    id: int
    attempt: int
    replica: int
    step: int
    epoch: int | None
    name: str
    value: float
    ts: float

    @classmethod
    def of(cls, stored: Any) -> MetricRow:
        """From a stored point: the ingest's inserted row (a dict) or a `MetricPoint`."""
        return cls(*_stored_fields(cls._fields, stored))

    def payload(self) -> dict[str, Any]:
        """What a stream client gets as the event's data (the event id carries the id)."""
        return _payload(self._fields, self)


class LogRow(NamedTuple):
    """A stored log line, with its SQL id."""

    id: int
    attempt: int
    replica: int
    ts: float
    line: str

    @classmethod
    def of(cls, stored: Any) -> LogRow:
        """From a stored line: the ingest's inserted row (a dict) or a `LogLine`."""
        return cls(*_stored_fields(cls._fields, stored))

    def payload(self) -> dict[str, Any]:
        """What a stream client gets as the event's data (the event id carries the id)."""
        return _payload(self._fields, self)


Row = MetricRow | LogRow


class Place(NamedTuple):
    """Where one commit's rows of one kind stand in their job's stream: the ids of the
    job's newest row of that kind (`prev`), of the other kind (`other`) and of its newest
    status change (`event`) when they were stored. -1: unknown."""

    prev: int = 0
    other: int = -1
    event: int = -1


UNPLACED = Place()  # an entry that does not say where its rows stand


def encode_entry(
    kind: str, rows: Sequence[Sequence[Any]], place: Place = UNPLACED
) -> dict[FieldT, EncodableT]:
    """A feed entry's Redis stream fields: `rows` in their row type's field order, as
    Rows or as plain tuples (the ingest's, which need no Row made per point)."""
    # orjson writes tuples, not NamedTuples: `default` hands it each Row as one.
    return {
        "kind": kind,
        "rows": orjson.dumps(rows, default=tuple),
        "prev": place.prev,
        "other": place.other,
        "event": place.event,
    }


ROW_TYPES: dict[str, type[MetricRow] | type[LogRow]] = {"metric": MetricRow, "log": LogRow}


@dataclass(frozen=True, slots=True)
class FeedEntry:
    """One entry of a job's live feed: rows of one kind from one commit, in id order."""

    kind: str  # metric | log
    rows: tuple[Row, ...]  # all of the kind's row type
    place: Place = UNPLACED  # where they stand in the job's stream

    def encode(self) -> dict[FieldT, EncodableT]:
        """The entry's Redis stream fields (for XADD)."""
        return encode_entry(self.kind, self.rows, self.place)

    @classmethod
    def decode(cls, fields: Mapping[str, Any]) -> FeedEntry:
        """An entry from its stream fields (as XREAD returns them, or as `encode` wrote).

        Raises:
            FeedError: an unknown kind, or rows or `prev` of another shape.
        """
        kind = fields.get("kind")
        if kind not in ROW_TYPES:
            raise FeedError(f"unknown feed entry kind {str(kind)[:20]!r}")
        make = ROW_TYPES[kind]._make
        try:
            items = orjson.loads(fields.get("rows", b"[]"))
            # Ids are compared with readers' cursors: each row must at least be an array
            # that starts with an integer (`_make` checks the length).
            if type(items) is not list or not all(
                type(r) is list and r and type(r[0]) is int for r in items
            ):
                raise ValueError("rows must be arrays that start with an integer id")
            rows: tuple[Row, ...] = tuple(map(make, items))
            place = Place(
                int(fields.get("prev") or 0),
                int(fields.get("other", -1)),
                int(fields.get("event", -1)),
            )
        except (TypeError, ValueError) as exc:  # orjson.JSONDecodeError is a ValueError
            raise FeedError(f"malformed {kind} feed entry: {exc}") from exc
        return cls(kind, rows, place)
