"""Follow the JSON-lines file `cohort.report()` appends to ($COHORT_METRICS_FILE).

Each complete line is `{"step": int, "metrics": {name: number, ...}, "ts": unix time}`
(cohort/metrics.py writes them). The file is written by user code, a lower trust
zone: every line is checked, a bad one is skipped with a warning and never stalls
the lines after it, and a partial last line waits for the next read.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from pathlib import Path
from typing import Any

from workers.node.tfevents import Scalar

log = logging.getLogger("cohort.metricsfile")

READ_BYTES = 4 << 20  # per read: bounds memory and what one poll ships
MAX_STEP = 2**31 - 1  # the bounds of the SQL columns the points end in
MAX_NAME = 64


class MetricsFileReader:
    """Follows one replica's metrics file: each `read()` returns the points of new lines."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0  # where the next unread line starts
        self.bad_lines = 0
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
            # O_NOFOLLOW: the replica owns this directory; a link it put in the
            # file's place must not make the agent read some other file.
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            return b""  # nothing reported yet
        with os.fdopen(fd, "rb") as handle:
            handle.seek(self.offset)
            return handle.read(READ_BYTES)

    def _parse(self, raw: bytes) -> list[Scalar]:
        try:
            return parse_line(raw)
        except ValueError as exc:
            self._bad(str(exc))
            return []

    def _bad(self, why: str) -> None:
        self.bad_lines += 1
        # Rate-limited: a script writing garbage in a loop must not flood the agent's log.
        if self.bad_lines <= 5 or self.bad_lines % 1000 == 0:
            log.warning("%s: skipping a bad line (%s); %d bad lines so far",
                        self.path, why, self.bad_lines)


def parse_line(raw: bytes) -> list[Scalar]:
    """The points of one metrics line; ValueError saying what is wrong with it."""
    try:
        record = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    step, metrics, ts = record.get("step"), record.get("metrics"), record.get("ts", time.time())
    if not _is_int(step) or not 0 <= step <= MAX_STEP:
        raise ValueError(f"step must be an integer in 0..{MAX_STEP}, got {step!r:.40}")
    if not isinstance(metrics, dict) or not metrics:
        raise ValueError("metrics must be a non-empty object")
    if not _is_number(ts):
        raise ValueError(f"ts must be a finite number, got {ts!r:.40}")
    points = []
    for name, value in metrics.items():
        if not (0 < len(name) <= MAX_NAME and "\x00" not in name):
            raise ValueError(f"metric name {name[:20]!r} is empty or longer than {MAX_NAME}")
        if not _is_number(value):
            raise ValueError(f"metric {name!r} is not a finite number: {value!r:.40}")
        points.append(Scalar(step, name, float(value), float(ts)))
    return points


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))
