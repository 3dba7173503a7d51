"""The `cohort:metrics` sender: `MetricReporter` buffers one replica's metric points and
ships them to Redis in batches, and sends its progress heartbeat.

Shared by the replica process (the Keras callback, the resource sampler, the final
metrics) and the node agent (the points it reads from a replica's metrics file and
TensorBoard event files, workers/node/scalars.py), so both send the same batches with
the same retries and replay; node and replica code never import each other.

Every stream entry has one field `data`, a `MetricBatch` (services/wire/batches.py).
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

import redis

from services.wire import client as wire_client
from services.wire.batches import MetricBatch, Point, ProgressBeat
from services.wire.keys import METRICS_STREAM, PROGRESS_HASH, STREAM_MAXLEN
from workers.replay import RecentlySent

FLUSH_INTERVAL = 0.25  # seconds between time-triggered flushes
FLUSH_POINTS = 200  # a buffer this large is flushed at the next step
MAX_BUFFER = 100_000  # beyond this (Redis down for long) the oldest points are dropped
ENTRY_POINTS = 1_000  # points per stream entry, so a backlog never becomes one huge entry
SEND_ATTEMPTS = 3
RETRY_BACKOFF = 0.05  # seconds; doubled after each failed attempt
MAX_PAUSE = 30.0  # longest pause of time-triggered flushes after repeated failures


def warn(message: str) -> None:
    """Write one `cohort: warning:` line to stderr."""
    print(f"cohort: warning: {message}", file=sys.stderr, flush=True)  # noqa: T201


def connect(redis_url: str) -> redis.Redis:
    """A Redis client for the metrics stream (lazy: nothing is sent until a flush)."""
    # No retries in redis-py: our own loop is shorter, so a dead Redis costs training
    # only a few milliseconds per flush.
    return wire_client.connect(redis_url, retries=0, socket_timeout=5.0,
                               decode_responses=False, health_check_interval=0)


# Seconds between two progress heartbeats of one replica.
BEAT_INTERVAL = 1.0


class MetricReporter:
    """Buffers one replica's metric points and appends them to the metrics stream in batches."""

    def __init__(
        self,
        client: Any,
        *,
        job_id: int,
        attempt: int,
        replica: int,
        flush_interval: float = FLUSH_INTERVAL,
        flush_points: int = FLUSH_POINTS,
        max_buffer: int = MAX_BUFFER,
    ) -> None:
        self._client = client
        self._job_id, self._attempt, self._replica = job_id, attempt, replica
        self._flush_interval = flush_interval
        self._flush_points = flush_points
        self._max_buffer = max_buffer
        self._buffer: list[Point] = []
        # The SIGTERM watchdog thread may flush while the main thread is training.
        self._lock = threading.Lock()
        self._last_flush = time.monotonic()
        self._paused_until = 0.0  # after failures, time-triggered flushes wait until then
        self._failures = 0
        self._skipped: set[str] = set()
        self.dropped = 0
        self.last_step = 0
        self._last_beat = 0.0
        self._beat_floor = 0.0
        self._recent: RecentlySent[list[Point]] = RecentlySent()  # for a Redis restart

    def beat(self, extend: float = 0.0) -> None:
        """Progress heartbeat (at most one a second): this replica is still stepping.

        Sent from the training loop itself, never from a thread, so a replica stuck
        in a collective, a frozen input pipeline or a stopped process goes quiet and
        the scheduler's watchdog sees it. A beat says "alive through this time";
        `extend` dates it ahead for a phase with no steps to beat from (saving).
        """
        now = time.monotonic()
        if now - self._last_beat < BEAT_INTERVAL and not extend:
            return
        self._last_beat = now
        # Never date a beat earlier than an extension already granted.
        self._beat_floor = max(self._beat_floor, time.time() + extend)
        try:
            field, value = ProgressBeat(self._job_id, self._attempt, self._replica,
                                        self._beat_floor).encode()
            self._client.hset(PROGRESS_HASH, field, value)
        except Exception:  # noqa: BLE001 - a missed beat is retried next second
            pass

    @classmethod
    def from_url(cls, redis_url: str, **kwargs: Any) -> MetricReporter:
        """A reporter writing to the Redis at `redis_url`."""
        return cls(connect(redis_url), **kwargs)

    @property
    def pending(self) -> int:
        """Number of points not yet written to Redis."""
        return len(self._buffer)

    def add(
        self, step: int, epoch: int | None, name: str, value: Any, ts: float | None = None
    ) -> None:
        """Buffer one observation (non-numeric and non-finite values are skipped)."""
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        if not math.isfinite(number):
            # JSON has no NaN/Infinity and the protocol promises a float: skip, say so once.
            if name not in self._skipped:
                self._skipped.add(name)
                warn(f"metric {name!r} has non-finite or non-numeric value {value!r}; not reported")
            return
        point = (int(step), epoch, name, number, time.time() if ts is None else ts)
        with self._lock:
            self._buffer.append(point)
            if len(self._buffer) > self._max_buffer:
                # Drop a tenth at once so a long outage does not make every add O(n).
                excess = len(self._buffer) - self._max_buffer + self._max_buffer // 10
                del self._buffer[:excess]
                self.dropped += excess
                warn(
                    f"metrics buffer full; dropped {excess} oldest points ({self.dropped} in total)"
                )
        if step > self.last_step:
            self.last_step = int(step)

    def due(self) -> bool:
        """Whether a time- or size-triggered flush should happen now."""
        now = time.monotonic()
        if now < self._paused_until:
            return False
        return (
            len(self._buffer) >= self._flush_points
            or now - self._last_flush >= self._flush_interval
        )

    def maybe_flush(self, *, force: bool = False) -> None:
        """Flush if due (or `force`), unless paused by recent failures; cheap per step."""
        if (force and time.monotonic() >= self._paused_until) or self.due():
            self.flush()

    def flush(self, *, wait: float = 0.0, lock_timeout: float = -1) -> bool:
        """Send all buffered points; on failure keep them, and keep retrying up to `wait` s."""
        deadline = time.monotonic() + wait
        # lock_timeout lets a last-resort flush from another thread give up
        # rather than hang behind a flush stuck in the main thread.
        if not self._lock.acquire(timeout=lock_timeout):
            return False
        try:
            while True:
                if self._send_buffer():
                    return True
                if time.monotonic() >= deadline:
                    return False
                time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
        finally:
            self._lock.release()

    def report_final(
        self, metrics: Mapping[str, Any], step: int | None = None, *, wait: float = 5.0
    ) -> bool:
        """Report the trainer's final metrics at the final step and flush them."""
        final_step = self.last_step if step is None else step
        ts = time.time()
        for name, value in metrics.items():
            self.add(final_step, None, str(name), value, ts)
        return self.flush(wait=wait)

    def close(self) -> None:
        """Release the Redis connection."""
        close = getattr(self._client, "close", None)
        if close is not None:
            try:
                close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass

    def _send_buffer(self) -> bool:
        # Called with the lock held. Entries already written are removed from the
        # buffer one by one, so a failure half-way never re-sends them.
        while self._buffer:
            chunk = self._buffer[:ENTRY_POINTS]
            error = self._send(chunk)
            if error is not None:
                self._failures += 1
                self._paused_until = time.monotonic() + min(MAX_PAUSE, 0.25 * 2**self._failures)
                if self._failures == 1 or self._failures % 10 == 0:
                    warn(
                        f"could not write metrics to Redis ({type(error).__name__}: {error}); "
                        f"{len(self._buffer)} points kept for the next flush"
                    )
                return False
            del self._buffer[: len(chunk)]
            self._remember(chunk)
        if self._failures:
            warn(f"metrics reach Redis again after {self._failures} failed flushes")
        self._failures = 0
        self._paused_until = 0.0
        self._last_flush = time.monotonic()
        return True

    def _remember(self, chunk: list[Point]) -> None:
        """Keep what was sent lately: if Redis restarts and loses it before the
        control plane stored it, it is sent again (stored once: the key is unique)."""
        self._recent.add(chunk)
        lost = self._recent.lost_to_restart(self._client)
        if lost:
            warn("Redis restarted: sending the last points again")
            for old in lost:
                self._send(old)

    def _send(self, points: list[Point]) -> Exception | None:
        payload = MetricBatch(self._job_id, self._attempt, self._replica, points).encode()
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
