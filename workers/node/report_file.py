"""Follow the JSON-lines file `cohort.report()` appends to ($COHORT_METRICS_FILE).

Each complete line is `{"step": int, "metrics": {name: number, ...}, "ts": unix time}`
or a beat `{"beat": unix time}` (cohort/metrics.py owns the format, its encoder and
decoder). User code writes the file, a lower trust zone: every line is checked, a bad
one is skipped with a warning and never stalls the lines after it, a partial last line
waits for the next read, and a beat dated ahead counts for at most MAX_BEAT_AHEAD.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from cohort.metrics import decode_line
from services.storage.owned_tree import OwnedTree
from services.wire.batches import MAX_BEAT_AHEAD
from workers.node.tfevents import Scalar

log = logging.getLogger("cohort.report_file")

READ_BYTES = 4 << 20  # per read: bounds memory and what one poll ships


class MetricsFileReader:
    """Follows one replica's metrics file: each `read()` returns the points of new lines."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0  # where the next unread line starts
        self.bad_lines = 0
        self.beats = 0  # beat lines read
        self.alive_until = 0.0  # the latest beat read, bounded by MAX_BEAT_AHEAD
        self._discarding = False  # inside a line longer than READ_BYTES: skip to its end

    def read(self, *, final: bool = False) -> list[Scalar]:
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
        points: list[Scalar] = []
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

    def _parse(self, raw: bytes) -> list[Scalar]:
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
        return [Scalar(*point) for point in decoded.points]

    def _bad(self, why: str) -> None:
        self.bad_lines += 1
        # Rate-limited: a script writing garbage in a loop must not flood the agent's log.
        if self.bad_lines <= 5 or self.bad_lines % 1000 == 0:
            log.warning(
                "%s: skipping a bad line (%s); %d bad lines so far", self.path, why, self.bad_lines
            )
