"""`PointBuffer`: one replica's metric points, buffered and sent in batches, and its
progress heartbeat; what the points travel over is a subclass's.

Two senders share it: the replica's `ReplicaReporter` (workers/replica/report_writer.py),
which appends lines to the replica's metrics file, and its agent's `MetricReporter`
(workers/node/report_shipper.py), which ships the points read there to Redis in
batches. Replicas hold no Redis credentials, so this module imports nothing that dials
Redis.

A training loop reports its steps through `step_recorder()`: per step it appends one
`StepRecord` (the logs as Keras gave them, unconverted) to a deque, and nothing else. A
sender thread turns the records into points (float conversion, non-finite checks),
encodes and ships them every flush interval; any flush does the same first, so points
always leave in the order they were recorded. The training thread takes no lock per step:
`deque.append` and `deque.popleft` are atomic in CPython, and only one thread at a time
(the one holding the lock) pops.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from services.wire.batches import Point
from workers.step_records import StepRecord, StepSampler

FLUSH_INTERVAL = 0.25  # seconds between time-triggered flushes
FLUSH_POINTS = 200  # a buffer this large is flushed at the next step
MAX_BUFFER = 100_000  # beyond this (the sink down for long) the oldest points are dropped
ENTRY_POINTS = 1_000  # points per send, so a backlog never becomes one huge entry
MAX_PAUSE = 30.0  # longest pause of time-triggered flushes after repeated failures
BEAT_INTERVAL = 1.0  # seconds between two progress heartbeats of one replica
# Step records kept while the sender cannot keep up (its write stuck): beyond this the
# oldest are dropped, as MAX_BUFFER drops the oldest points.
MAX_RECORDS = 50_000


def status_line(line: str, stream: TextIO) -> None:
    """Write one status line to `stream` and flush it. A replica's output goes to its
    log on DATA_DIR: when that disk is full the line is lost, never the replica (a
    warning that raised would end the metrics sender, or training on a `cohort:` line)."""
    try:
        print(line, file=stream, flush=True)  # noqa: T201 - the agent's log is the audience
    except OSError:
        pass


def warn(message: str) -> None:
    """Write one `cohort: warning:` line to stderr."""
    status_line(f"cohort: warning: {message}", sys.stderr)


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
        sampler: StepSampler | None = None,
    ) -> None:
        """`sampler`: which step records become points (workers/step_records.py); None:
        every one."""
        self._job_id, self._attempt, self._replica = job_id, attempt, replica
        self._sampler = sampler
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
        self._last_step = 0  # of the points buffered so far; see last_step
        self._last_beat = 0.0
        self._beat_floor = 0.0
        self._records: deque[StepRecord] = deque(maxlen=MAX_RECORDS)
        self._sender: threading.Thread | None = None
        self._wake = threading.Event()  # ends the sender's wait early (epoch end, stop)
        self._stopping = False

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

        Sent from the training loop itself, never from a timer thread, so a replica
        stuck in a collective, a frozen input pipeline or a stopped process goes quiet
        and the scheduler's watchdog sees it. While steps are recorded the lines of
        points the sender writes for them are progress too (the agent counts every
        line), and the sender beats for steps it recorded but held back (sampled), so a
        loop beats only where it makes no steps (evaluation, serving). A beat says
        "alive through this time"; `extend` dates it ahead for a phase with no steps to
        beat from (saving)."""
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
        return len(self._buffer) + len(self._records)  # points and step records unshipped

    @property
    def last_step(self) -> int:
        """The latest step seen, recorded steps not yet converted included (the
        resource sampler samples once per step at this step)."""
        try:
            return max(self._last_step, self._records[-1].step)
        except IndexError:  # no records (or the sender just took the last)
            return self._last_step

    # -- steps, recorded by the training thread --------------------------------
    def step_recorder(self) -> Callable[[StepRecord], None]:
        """The function a training loop calls once per step with a `StepRecord`: an
        append to a deque, nothing more (no lock, no conversion, no I/O). Starts the
        sender thread that ships the records every flush interval."""
        if self._sender is None:
            self._sender = threading.Thread(
                target=self._send_loop, daemon=True, name="cohort-metrics-sender"
            )
            self._sender.start()
        return self._records.append

    def wake_sender(self) -> None:
        """Ship what was recorded now rather than at the next interval (epoch ends)."""
        self._wake.set()

    def stop_sender(self, timeout: float = 5.0) -> None:
        """End the sender thread (after its current flush); records left are shipped
        by the next `flush()`."""
        sender = self._sender
        if sender is None:
            return
        self._stopping = True
        self._wake.set()
        sender.join(timeout)

    def _send_loop(self) -> None:
        # No beats from here: a line of points is progress to the agent, and records
        # arrive only while the training thread steps, so a hung loop goes quiet.
        while not self._stopping:
            self._wake.wait(self._flush_interval)
            self._wake.clear()
            if self._stopping or not (self._records or self._buffer):
                continue
            try:
                with self._lock:
                    stepped = bool(self._records)
                    # Converted even while sends are paused, so MAX_BUFFER bounds a
                    # long outage with its count of dropped points.
                    self._drain()
                    if self._buffer and time.monotonic() >= self._paused_until:
                        self._send_buffer()
                    elif stepped and not self._buffer:
                        # Every step since was held back (sampled): the records are the
                        # training loop's own progress, which their lines would have shown.
                        self.beat()
            except Exception as exc:  # noqa: BLE001 - the thread must outlive a bad flush
                warn(f"shipping metrics failed ({type(exc).__name__}: {exc}); retrying")

    def _drain(self, *, release: bool = False) -> None:
        """Turn the step records into points (with the lock held, so one thread pops
        at a time and points keep the records' order); `release`: the step the sampler
        holds back too (a flush that must show the newest step)."""
        records = self._records
        sampler = self._sampler
        if not records and not (release and sampler is not None):
            return
        if len(records) == records.maxlen:
            warn(
                f"{records.maxlen} step records waiting to be shipped; older ones "
                "may have been dropped"
            )
        # One offset per drain: the wall clock a perf_counter reading corresponds to.
        offset = time.time() - time.perf_counter()
        convert = self._convert
        while records:
            record = records.popleft()
            if sampler is None:
                convert(record, offset)
            else:
                for kept in sampler.take(record):
                    convert(kept, offset)
        if release and sampler is not None:
            for kept in sampler.release():
                convert(kept, offset)

    def _convert(self, record: StepRecord, offset: float) -> None:
        """Buffer one step record's points (the lock held)."""
        step, epoch, logs, prefix, clock, step_time, examples = record
        append = self._append_point
        ts = offset + clock
        if logs:
            for name, value in logs.items():
                append(step, epoch, f"{prefix}{name}", value, ts)
        if step_time is not None:
            append(step, epoch, "step_time", step_time, ts)
            if step_time > 0:
                append(step, epoch, "examples_per_sec", examples / step_time, ts)

    def _append_point(self, step: int, epoch: int | None, name: str, value: Any, ts: float) -> None:
        """Check and buffer one point (the lock held)."""
        try:
            number = float(value)
        except Exception:  # noqa: BLE001 - e.g. a tensor that is not a scalar: skipped
            number = math.nan
        if not math.isfinite(number):
            # JSON has no NaN/Infinity and the protocol promises a float: skip, say so once.
            if name not in self._skipped:
                self._skipped.add(name)
                warn(f"metric {name!r} has non-finite or non-numeric value {value!r}; not reported")
            return
        step = int(step)
        buffer = self._buffer
        buffer.append(Point(step, epoch, name, number, ts))
        if len(buffer) > self._max_buffer:
            # Drop a tenth at once so a long outage does not make every add O(n).
            excess = len(buffer) - self._max_buffer + self._max_buffer // 10
            del buffer[:excess]
            self.dropped += excess
            warn(f"metrics buffer full; dropped {excess} oldest points ({self.dropped} in total)")
        if step > self._last_step:
            self._last_step = step

    # -- single points -----------------------------------------------------------
    def add(
        self, step: int, epoch: int | None, name: str, value: Any, ts: float | None = None
    ) -> None:
        """Buffer one observation (non-numeric and non-finite values are skipped),
        after the steps recorded before it."""
        with self._lock:
            self._drain()
            self._append_point(step, epoch, name, value, time.time() if ts is None else ts)

    def due(self) -> bool:
        """Whether a time- or size-triggered flush should happen now."""
        now = time.monotonic()
        if now < self._paused_until:
            return False
        return (
            len(self._buffer) + len(self._records) >= self._flush_points
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
            self._drain(release=True)
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
        with self._lock:
            self._drain(release=True)  # the steps recorded so far set last_step
            final_step = self.last_step if step is None else step
            ts = time.time()
            for name, value in metrics.items():
                self._append_point(final_step, None, str(name), value, ts)
        return self.flush(wait=wait)

    def _send_buffer(self) -> bool:
        # Called with the lock held. Chunks already shipped are removed from the
        # buffer one by one, so a failure half-way never re-sends them.
        while self._buffer:
            chunk = self._buffer[:ENTRY_POINTS]
            error = self._send(chunk)
            if error is not None:
                self._not_shipped(error)
                return False
            del self._buffer[: len(chunk)]
            self._sent(chunk)
        self._flushed()
        return True

    def _not_shipped(self, error: Exception) -> None:
        """A send failed: time-triggered flushes pause, longer after each failure."""
        self._failures += 1
        self._paused_until = time.monotonic() + min(MAX_PAUSE, 0.25 * 2**self._failures)
        if self._failures == 1 or self._failures % 10 == 0:
            warn(
                f"could not write metrics to {self.where} ({type(error).__name__}: "
                f"{error}); {len(self._buffer)} points kept for the next flush"
            )

    def _flushed(self) -> None:
        """The whole buffer reached the sink."""
        if self._failures:
            warn(f"metrics reach {self.where} again after {self._failures} failed flushes")
        self._failures = 0
        self._paused_until = 0.0
        self._last_flush = time.monotonic()
