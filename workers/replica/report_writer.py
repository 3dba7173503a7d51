"""`ReplicaReporter`: how Cohort's runner reports a replica's metrics and progress — as
lines appended to the replica's metrics file ($COHORT_METRICS_FILE), which its agent
follows and ships (workers/node/report_shipper.py), exactly as it ships a `command`'s
`cohort.report()` lines. The replica's side of reporting: it writes, the node ships,
the control plane ingests (workers/control/ingest.py).

A replica holds no Redis credentials: whatever code runs in it (a bundle's trainer is
the user's code) can only write its own replica's points and beats, and the agent,
which reads them as untrusted lines, bounds what a beat may claim. The per-step cost is
that of the shared buffer (workers/point_buffer.py): one step record appended to a deque;
the sender thread converts the records and writes them every FLUSH_INTERVAL in one
write (bench/replica_reporting.py measures it).
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable
from pathlib import Path

import orjson

from cohort.metrics import encode_beat, points_record
from services.wire.batches import Point
from workers.point_buffer import PointBuffer

__all__ = ["ReplicaReporter"]


def encode_chunk(points: list[Point]) -> bytes:
    """The lines of `points`: one per run of points sharing (step, epoch, ts), a name
    never twice in a line (a later value at the same step gets a line of its own)."""
    lines: list[bytes] = []
    head: tuple[int, int | None, float] | None = None
    metrics: dict[str, float] = {}
    for step, epoch, name, value, ts in points:
        if (step, epoch, ts) != head or name in metrics:
            if head is not None:
                lines.append(orjson.dumps(points_record(head[0], head[1], metrics, head[2])))
            head, metrics = (step, epoch, ts), {}
        metrics[name] = value
    if head is not None:
        lines.append(orjson.dumps(points_record(head[0], head[1], metrics, head[2])))
    return b"\n".join(lines) + b"\n" if lines else b""


class ReplicaReporter(PointBuffer):
    """Buffers one replica's points and appends them to its metrics file."""

    where = "the metrics file"

    def __init__(
        self, path: Path, *, on_no_space: Callable[[], None] | None = None, **kwargs: object
    ) -> None:
        """`on_no_space`: called when a write fails for want of space (ENOSPC)."""
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.path = Path(path)
        self.on_no_space = on_no_space
        self._fd: int | None = None
        self._torn = False  # the last write stopped inside a line (a full disk)
        # Beats (training thread) and points (sender thread) may open it at once.
        self._open_lock = threading.Lock()

    def _descriptor(self) -> int:
        with self._open_lock:
            if self._fd is None:
                # O_APPEND: the runner's lines and the trainer's own cohort.report() lines
                # (another descriptor of the same file) never overwrite each other, nor
                # do a beat and a chunk written by two threads.
                self._fd = os.open(
                    self.path,
                    os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0),
                    0o600,
                )
            return self._fd

    def _write(self, data: bytes) -> None:
        fd = self._fd if self._fd is not None else self._descriptor()
        # A write the disk filled half way left a line without its end: the retry starts
        # on a line of its own, so the torn one is skipped as bad and not merged into
        # (and losing) the first line sent again.
        view = memoryview(b"\n" + data if self._torn else data)
        while view:
            try:
                written = os.write(fd, view)
            except OSError as exc:
                self._torn = self._torn or len(view) < len(data)
                if exc.errno == errno.ENOSPC and self.on_no_space is not None:
                    self.on_no_space()
                raise
            view = view[written:]
        self._torn = False

    def _send(self, points: list[Point]) -> Exception | None:
        try:
            self._write(encode_chunk(points))
        except OSError as exc:  # a full disk: kept, tried again at the next flush
            return exc
        return None

    def _send_beat(self, alive_until: float) -> None:
        self._write(encode_beat(alive_until))

    def close(self) -> None:
        """Stop the sender, write what it left (briefly: the runner flushed already on
        every path that records steps), close the file."""
        self.stop_sender()
        if self.pending:
            self.flush(lock_timeout=1.0)
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None
