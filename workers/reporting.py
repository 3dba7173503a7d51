"""`PointBuffer`: one replica's metric points, buffered and sent in batches, and its
progress heartbeat; what the points travel over is a subclass's.

Two senders share it: the agent's `MetricReporter` (workers/reporter.py), which appends
batches to Redis, and the replica's `ReplicaReporter` (workers/replica/report_channel.py),
which appends lines to the replica's metrics file for its agent to ship. Replicas hold no
Redis credentials, so this module imports nothing that dials Redis.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

from services.wire.batches import Point

FLUSH_INTERVAL = 0.25  # seconds between time-triggered flushes
FLUSH_POINTS = 200  # a buffer this large is flushed at the next step
MAX_BUFFER = 100_000  # beyond this (the sink down for long) the oldest points are dropped
ENTRY_POINTS = 1_000  # points per send, so a backlog never becomes one huge entry
MAX_PAUSE = 30.0  # longest pause of time-triggered flushes after repeated failures
# Seconds between two progress heartbeats of one replica.
BEAT_INTERVAL = 1.0


def warn(message: str) -> None:
    """Write one `cohort: warning:` line to stderr."""
    print(f"cohort: warning: {message}", file=sys.stderr, flush=True)  # noqa: T201


class PointBuffer:
    """Buffers one replica's points; `_send` (a subclass's) ships a chunk of them."""

    where = "the metrics sink"  # named in warnings

    def __init__(
        self,
        *,
        job_id: int,
        attempt: int,
        replica: int,
        flush_interval: float = FLUSH_INTERVAL,
        flush_points: int = FLUSH_POINTS,
        max_buffer: int = MAX_BUFFER,
    ) -> None:
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

    # -- what a subclass provides -------------------------------------------
    def _send(self, points: list[Point]) -> Exception | None:
        """Ship `points`; the error if they were not shipped."""
        raise NotImplementedError

    def _sent(self, points: list[Point]) -> None:
        """Called after `points` were shipped (the lock held)."""

    def _send_beat(self, alive_until: float) -> None:
        """Say the replica is alive through `alive_until` (errors are the caller's)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the sink holds."""

    # -- the buffer ------------------------------------------------------------
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
            self._send_beat(self._beat_floor)
        except Exception:  # noqa: BLE001 - a missed beat is retried next second
            pass

    @property
    def pending(self) -> int:
        """Number of points not yet shipped."""
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

    def _send_buffer(self) -> bool:
        # Called with the lock held. Chunks already shipped are removed from the
        # buffer one by one, so a failure half-way never re-sends them.
        while self._buffer:
            chunk = self._buffer[:ENTRY_POINTS]
            error = self._send(chunk)
            if error is not None:
                self._failures += 1
                self._paused_until = time.monotonic() + min(MAX_PAUSE, 0.25 * 2**self._failures)
                if self._failures == 1 or self._failures % 10 == 0:
                    warn(
                        f"could not write metrics to {self.where} ({type(error).__name__}: "
                        f"{error}); {len(self._buffer)} points kept for the next flush"
                    )
                return False
            del self._buffer[: len(chunk)]
            self._sent(chunk)
        if self._failures:
            warn(f"metrics reach {self.where} again after {self._failures} failed flushes")
        self._failures = 0
        self._paused_until = 0.0
        self._last_flush = time.monotonic()
        return True
