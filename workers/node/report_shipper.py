"""The node's side of a replica's metrics: its metrics file read, its points shipped.

A replica writes its points and beats as JSON lines in its metrics file
($COHORT_METRICS_FILE: Cohort's runner through workers/replica/report_writer.py, any
script through `cohort.report()`; cohort/metrics.py owns the line format, its encoder
and decoder). `MetricsFileReader` follows that file: user code writes it, a lower trust
zone, so every line is checked, a bad one is skipped with a warning and never stalls the
lines after it, a partial last line waits for the next read, and a beat dated ahead
counts for at most MAX_BEAT_AHEAD. The points it reads (and those of TensorBoard event
files, workers/node/replica_files.py) are shipped by `MetricReporter` to the `cohort:metrics`
stream in batches, with retries and replay after a Redis restart (workers/node/replay.py);
the buffering is shared with the replica's writer (workers/point_buffer.py).

Every stream entry has one field `data`, a `MetricBatch` (services/wire/batches.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis

from cohort.metrics import decode_line
from services.storage.owned_tree import OwnedTree
from services.wire import client as wire_client
from services.wire.batches import MAX_BEAT_AHEAD, MetricBatch, Point, ProgressBeat
from services.wire.keys import METRICS_STREAM, PROGRESS_HASH, STREAM_MAXLEN
from workers.node.replay import RecentlySent
from workers.point_buffer import (
    BEAT_INTERVAL,
    ENTRY_POINTS,
    FLUSH_INTERVAL,
    FLUSH_POINTS,
    MAX_BUFFER,
    PointBuffer,
    warn,
)

__all__ = [
    "BEAT_INTERVAL",
    "ENTRY_POINTS",
    "FLUSH_INTERVAL",
    "FLUSH_POINTS",
    "MAX_BUFFER",
    "MetricReporter",
    "MetricsFileReader",
    "connect",
    "warn",
]

log = logging.getLogger("cohort.report_shipper")

READ_BYTES = 4 << 20  # per read: bounds memory and what one poll ships

SEND_ATTEMPTS = 3
RETRY_BACKOFF = 0.05  # seconds; doubled after each failed attempt


def connect(redis_url: str) -> redis.Redis:
    """A Redis client for the metrics stream (lazy: nothing is sent until a flush)."""
    # No retries in redis-py: our own loop is shorter, so a dead Redis costs the
    # sender only a few milliseconds per flush.
    return wire_client.connect(
        redis_url, retries=0, socket_timeout=5.0, decode_responses=False, health_check_interval=0
    )


class MetricReporter(PointBuffer):
    """Buffers one replica's metric points and appends them to the metrics stream in batches."""

    where = "Redis"

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._client = client
        self._recent: RecentlySent[list[Point]] = RecentlySent()  # for a Redis restart
        # Shipped with the node's other replicas' points at the node's tick
        # (workers/node/shipments.py), not at each poll; an explicit flush still ships.
        self.joint = False

    @classmethod
    def from_url(cls, redis_url: str, **kwargs: Any) -> MetricReporter:
        """A reporter writing to the Redis at `redis_url`."""
        return cls(connect(redis_url), **kwargs)

    def _send_beat(self, alive_until: float) -> None:
        field, value = ProgressBeat(
            self._job_id,
            self._attempt,
            self._replica,
            alive_until,
            ahead=max(0.0, alive_until - time.time()),
        ).encode()
        self._client.hset(PROGRESS_HASH, field, value)

    def close(self) -> None:
        """Release the Redis connection."""
        close = getattr(self._client, "close", None)
        if close is not None:
            try:
                close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass

    def _sent(self, points: list[Point]) -> None:
        """Keep what was sent lately: if Redis restarts and loses it before the
        control plane stored it, it is sent again (stored once: the key is unique)."""
        self._recent.add(points)
        self._replay_lost()

    def _replay_lost(self, *, force: bool = False) -> None:
        """Send again what a wipe of Redis erased, if Redis lost its data since the last
        look (the lock held)."""
        self._replay(self._recent.lost_to_restart(self._client, force=force))

    def _replay(self, lost: list[list[Point]]) -> None:
        """Send `lost` again (the lock held). What cannot be sent now goes back to the
        buffer."""
        if lost:
            warn("Redis restarted: sending the last points again")
            for old in lost:
                if self._send(old) is not None:
                    self._buffer[:0] = old
                else:
                    self._recent.add(old)  # erased again, it is sent again

    def send_again(self) -> None:
        """After the replica ended (workers/node/replay.py AfterEnd): send what is still
        buffered, and again what a wipe erased since the last send."""
        if not self._lock.acquire(timeout=1.0):
            return  # the last flush is still under way: the next tick
        try:
            self._drain()
            if self._buffer:
                self._send_buffer()
            self._replay_lost(force=True)  # the replica ended: no later look would come
        finally:
            self._lock.release()

    def maybe_flush(self, *, force: bool = False) -> None:
        """Flush if due, unless the node's tick ships this reporter's points."""
        if not self.joint:
            super().maybe_flush(force=force)

    # -- a joint shipment (workers/node/shipments.py) ------------------------------
    @contextlib.contextmanager
    def held(self) -> Iterator[bool]:
        """This reporter's lock for a joint shipment, if it is free (False: a flush of
        its own is under way, its replica's exit)."""
        if not self._lock.acquire(blocking=False):
            yield False
            return
        try:
            yield True
        finally:
            self._lock.release()

    def due_entries(self) -> list[tuple[list[Point], bytes]]:
        """Under `held`: the buffer in chunks, each with its stream entry's `data`; none
        while sends pause after failures."""
        self._drain()
        if time.monotonic() < self._paused_until:
            return []
        chunks = [
            self._buffer[start : start + ENTRY_POINTS]
            for start in range(0, len(self._buffer), ENTRY_POINTS)
        ]
        return [(chunk, self._payload(chunk)) for chunk in chunks]

    def shipped(self, chunks: list[list[Point]], marker: bytes | str) -> None:
        """Under `held`: the chunks `due_entries` gave reached Redis, in the transaction
        that read the generation `marker` (services/wire/generation.py)."""
        # Out of the buffer first: a replay may put older points back at its head.
        del self._buffer[: sum(map(len, chunks))]
        lost = self._recent.lost_at(marker)  # before these chunks: they reached the new data
        for chunk in chunks:
            self._recent.add(chunk)
        self._replay(lost)
        self._flushed()

    def not_shipped(self, error: Exception) -> None:
        """Under `held`: the joint shipment failed; the points stay buffered."""
        self._not_shipped(error)

    def _payload(self, points: list[Point]) -> bytes:
        return MetricBatch(self._job_id, self._attempt, self._replica, points).encode()

    def _send(self, points: list[Point]) -> Exception | None:
        payload = self._payload(points)
        error: Exception | None = None
        for attempt in range(SEND_ATTEMPTS):
            if attempt:
                time.sleep(RETRY_BACKOFF * 2 ** (attempt - 1))
            try:
                self._client.xadd(
                    METRICS_STREAM, {"data": payload}, maxlen=STREAM_MAXLEN, approximate=True
                )
                return None
            except redis.RedisError as exc:
                error = exc
        return error


class MetricsFileReader:
    """Follows one replica's metrics file: each `read()` returns the points of new lines."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0  # where the next unread line starts
        self.bad_lines = 0
        self.beats = 0  # beat lines read
        self.alive_until = 0.0  # the latest beat read, bounded by MAX_BEAT_AHEAD
        self._discarding = False  # inside a line longer than READ_BYTES: skip to its end

    def read(self, *, final: bool = False) -> list[Point]:
        """Points of the lines completed since the last call; `final`: the replica has
        exited, so an unterminated last line is read too."""
        data = self._read_bytes()
        lines = data.split(b"\n")
        rest = lines.pop()  # after the last newline: a line still being written
        consumed = len(data) - len(rest)
        if len(data) == READ_BYTES and not lines:
            # One line longer than a read: not a report() line; drop it all.
            if not self._discarding:
                self._bad(f"a line longer than {READ_BYTES} bytes")
            self._discarding, consumed, rest = True, len(data), b""
        elif final and rest and len(data) < READ_BYTES:
            lines.append(rest)
            consumed = len(data)
        self.offset += consumed
        points: list[Point] = []
        for raw in lines:
            if self._discarding:
                self._discarding = False  # this is the end of the overlong line
                continue
            if raw.strip():
                points.extend(self._parse(raw))
        return points

    def _read_bytes(self) -> bytes:
        try:
            # The replica owns this directory: a link it put in the file's place must not
            # make the agent read some other file, nor a fifo hang it (owned_tree.py).
            fd = OwnedTree(self.path.parent).open(self.path.name)
        except OSError:
            return b""  # nothing reported yet
        with os.fdopen(fd, "rb") as handle:
            handle.seek(self.offset)
            return handle.read(READ_BYTES)

    def _parse(self, raw: bytes) -> list[Point]:
        try:
            decoded = decode_line(raw)
        except ValueError as exc:
            self._bad(str(exc))
            return []
        if decoded.beat is not None:
            self.beats += 1
            self.alive_until = max(
                self.alive_until, min(decoded.beat, time.time() + MAX_BEAT_AHEAD)
            )
        # The line's shape (cohort/metrics.py) to the one Point, here and nowhere else.
        return [Point(s, epoch, name, v, ts) for s, name, v, ts, epoch in decoded.points]

    def _bad(self, why: str) -> None:
        self.bad_lines += 1
        # Rate-limited: a script writing garbage in a loop must not flood the agent's log.
        if self.bad_lines <= 5 or self.bad_lines % 1000 == 0:
            log.warning(
                "%s: skipping a bad line (%s); %d bad lines so far", self.path, why, self.bad_lines
            )
