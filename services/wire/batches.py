"""Replicas and agents -> ingester: metric batches, log batches, and progress beats.

The batches are the hot path of the ingest (well over 100k points/s), so they are plain
dataclasses with hand-written decoders rather than pydantic models: one pass over the
points, exact JSON types as the other contracts (services/wire/contract.py) demand. A
malformed point or line is dropped and the rest kept; a malformed head refuses the
whole entry (WireError), so one bad value can never stall the ingest for every job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple, Self

import orjson

from services.wire.contract import WireError
from services.wire.keys import progress_field

# Bounds of the SQL `integer` columns: a value outside them would fail the whole batch's
# COPY, and a batch that always fails would stall the ingest (a poison entry).
INT_MAX = 2**31 - 1
MAX_NAME = 64  # characters of a metric name (the column's width)
MAX_LINE = 4000  # characters kept of a log line; a progress bar without newlines stays bounded
# How far ahead a beat may say the replica is alive (the runner dates its last beat
# FINISH_GRACE = 300 s ahead while it saves): a script cannot blind the hang watchdog.
MAX_BEAT_AHEAD = 600.0


class Point(NamedTuple):
    """One metric point of one replica: the one declaration of its fields, from the
    replica's metrics file to the SQL row (services/models/series.py `MetricPoint` adds
    the job, attempt, replica and id; services/wire/feed.py `MetricRow` reads it back).
    On the metrics stream it travels as a positional array in this order."""

    step: int  # the global training step
    epoch: int | None  # 0-based, None when the loop does not say
    name: str
    value: float  # finite
    ts: float  # the unix time it was observed


# (seq, ts, text): `seq` the 1-based line number in the replica's log file, `ts` the unix
# time the agent read it.
Line = tuple[int, float, str]


def _load(contract: str, raw: str | bytes) -> dict[str, Any]:
    # orjson: several times faster than json on 200-point batches; strict JSON and UTF-8
    # (no NaN or Infinity, no lone surrogates, which no SQL text can hold).
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise WireError(contract, "(message)", f"invalid JSON: {exc}") from None
    if type(data) is not dict:
        raise WireError(contract, "(message)", "must be a JSON object")
    return data


def _head(contract: str, data: dict[str, Any]) -> tuple[int, int, int]:
    values = []
    for field in ("job_id", "attempt", "replica"):
        value = data.get(field)
        if type(value) is not int or not 0 <= value <= INT_MAX:
            raise WireError(
                contract, field, f"must be an integer in 0..{INT_MAX}, got {str(value)[:32]!r}"
            )
        values.append(value)
    return values[0], values[1], values[2]


def _items(contract: str, data: dict[str, Any], field: str) -> list[Any]:
    items = data.get(field, [])
    if type(items) is not list:
        raise WireError(contract, field, "must be a list")
    return items


@dataclass(frozen=True, slots=True)
class MetricBatch:
    """One entry of the metrics stream: some points of one replica."""

    job_id: int
    attempt: int
    replica: int
    points: list[Point]

    def encode(self) -> bytes:
        """The entry's `data` (compact JSON)."""
        return orjson.dumps(
            {
                "job_id": self.job_id,
                "attempt": self.attempt,
                "replica": self.replica,
                "points": self.points,
            },
            default=tuple,  # orjson writes tuples, not NamedTuples: each Point as one
        )

    @classmethod
    def decode(cls, raw: str | bytes) -> Self:
        """The batch in `raw`, without its malformed points."""
        data = _load("MetricBatch", raw)
        job_id, attempt, replica = _head("MetricBatch", data)
        points: list[Point] = []
        append = points.append
        # One pass, exact types: this loop runs once per point of every replica.
        for point in _items("MetricBatch", data, "points"):
            if type(point) is not list or len(point) != 5:
                continue
            step, epoch, name, value, ts = point
            if type(value) is not float:
                if type(value) is not int:
                    continue
                value = float(value)
            if type(ts) is not float:
                if type(ts) is not int:
                    continue
                ts = float(ts)
            # orjson never yields a non-finite float: no isfinite() needed here.
            if (
                type(step) is int
                and 0 <= step <= INT_MAX
                and (epoch is None or (type(epoch) is int and 0 <= epoch <= INT_MAX))
                and type(name) is str
                and 0 < len(name) <= MAX_NAME
                and "\x00" not in name
            ):
                append(Point(step, epoch, name, value, ts))
        return cls(job_id, attempt, replica, points)


@dataclass(frozen=True, slots=True)
class LogBatch:
    """One entry of the logs stream: some lines of one replica's log file."""

    job_id: int
    attempt: int
    replica: int
    lines: list[Line]

    def encode(self) -> bytes:
        """The entry's `data` (compact JSON)."""
        return orjson.dumps(
            {
                "job_id": self.job_id,
                "attempt": self.attempt,
                "replica": self.replica,
                "lines": self.lines,
            }
        )

    @classmethod
    def decode(cls, raw: str | bytes) -> Self:
        """The batch in `raw`, without its malformed lines; a line's text is cut to
        MAX_LINE characters, without NUL (which no SQL text holds)."""
        data = _load("LogBatch", raw)
        job_id, attempt, replica = _head("LogBatch", data)
        lines: list[Line] = []
        for item in _items("LogBatch", data, "lines"):
            if type(item) is not list or len(item) != 3:
                continue
            seq, ts, text = item
            if type(ts) is int:
                ts = float(ts)
            if type(seq) is int and 0 <= seq <= INT_MAX and type(ts) is float and type(text) is str:
                lines.append((seq, ts, text[:MAX_LINE].replace("\x00", "")))
        return cls(job_id, attempt, replica, lines)


@dataclass(frozen=True, slots=True)
class ProgressBeat:
    """A replica is alive (still stepping): the value of field "job:attempt:index" of the
    progress hash is "until ahead".

    `until` is the sender's clock (the agent's): it only orders one replica's beats and
    changes with each, and the control plane never compares it with its own clock
    (services/cluster/arrivals.py). `ahead` is how many seconds past its sending the beat
    vouches for (a replica saving its model dates its last beat ahead): a duration, the
    same on every clock, at most MAX_BEAT_AHEAD.
    """

    job_id: int
    attempt: int
    index: int
    until: float
    ahead: float = 0.0

    @property
    def field(self) -> str:
        return progress_field(self.job_id, self.attempt, self.index)

    def encode(self) -> tuple[str, str]:
        """The hash field and its value."""
        return self.field, f"{float(self.until)!r} {float(self.ahead)!r}"

    @classmethod
    def decode(cls, field: str, value: str) -> Self:
        """The beat in one field of the progress hash (a value of `until` alone, as
        agents before `ahead` wrote, is a beat with nothing ahead)."""
        (job_id, attempt, index), until, ahead = cls.parse(field, value)
        return cls(job_id, attempt, index, until, ahead)

    @staticmethod
    def parse(field: str, value: str) -> tuple[tuple[int, int, int], float, float]:
        """decode's checks and values, as plain ((job, attempt, index), until, ahead): the
        scheduler reads every running replica's beat on every pass.

        Raises:
            WireError: not a beat.
        """
        key = ProgressBeat.key_of(field)
        numbers = str(value).split(" ")
        until = _finite("until", numbers[0])
        ahead = _finite("ahead", numbers[1]) if len(numbers) > 1 else 0.0
        if len(numbers) > 2 or ahead < 0:
            raise WireError(
                "ProgressBeat",
                "ahead",
                f"must be one number of seconds, 0 or more, got {str(value)[:64]!r}",
            )
        return key, until, min(ahead, MAX_BEAT_AHEAD)

    @staticmethod
    def key_of(field: str) -> tuple[int, int, int]:
        """(job, attempt, index) of a field of the progress (or output) hash, written in
        its one spelling (progress_field's): anything else is not an agent's.

        Raises:
            WireError: not such a field.
        """
        parts = field.split(":")
        if len(parts) == 3 and all(part.isascii() and part.isdigit() for part in parts):
            key = (int(parts[0]), int(parts[1]), int(parts[2]))
            if progress_field(*key) == field:
                return key
        raise WireError("ProgressBeat", "field", f"must be job:attempt:index, got {field[:64]!r}")


def _finite(name: str, text: str) -> float:
    try:
        number = float(text)
    except (TypeError, ValueError):
        raise WireError("ProgressBeat", name, f"must be a number, got {str(text)[:32]!r}") from None
    if not math.isfinite(number):
        raise WireError("ProgressBeat", name, "must be finite")
    return number
