"""`ReplicaReporter`: how Cohort's runner reports a replica's metrics and progress — as
lines appended to the replica's metrics file ($COHORT_METRICS_FILE), which its agent
follows and ships (workers/node/scalars.py), exactly as it ships a `command`'s
`cohort.report()` lines.

A replica holds no Redis credentials: whatever code runs in it (a bundle's trainer is
the user's code) can only write its own replica's points and beats, and the agent,
which reads them as untrusted lines, bounds what a beat may claim. The per-step cost is
that of the shared buffer (workers/reporting.py): points are appended in memory and
written every FLUSH_INTERVAL in one write (bench/replica_reporting.py measures it).
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson

from cohort.metrics import encode_beat, points_record
from services.wire.batches import Point
from workers.reporting import PointBuffer

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

    def __init__(self, path: Path, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.path = Path(path)
        self._fd: int | None = None

    def _write(self, data: bytes) -> None:
        if self._fd is None:
            # O_APPEND: the runner's lines and the trainer's own cohort.report() lines
            # (another descriptor of the same file) never overwrite each other.
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT |
                               getattr(os, "O_NOFOLLOW", 0), 0o600)
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]

    def _send(self, points: list[Point]) -> Exception | None:
        try:
            self._write(encode_chunk(points))
        except OSError as exc:  # a full disk: kept, tried again at the next flush
            return exc
        return None

    def _send_beat(self, alive_until: float) -> None:
        self._write(encode_beat(alive_until))

    def close(self) -> None:
        """Close the file."""
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None
