"""Ship a replica's log file to the control plane, line by line, through Redis.

The agent starts one `LogShipper` thread per replica it spawns. It follows the
replica's log file (stdout and stderr), stamps each complete line with its number
and the time it was read, and appends batches to `cohort:logs` (protocol in
services/logs.py), where the scheduler leader stores them in SQL. So logs survive the
job's files and node, and the api never needs the agents' disks.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

import redis

from services.bus import STREAM_MAXLEN
from services.live import LOGS_STREAM
from workers.launcher import ReplicaKey

log = logging.getLogger("cohort.logship")

POLL_SECONDS = 0.2  # how often the file is checked: the live log lags by about this
BATCH_LINES = 500  # lines per stream entry
READ_BYTES = 1 << 20


class LogShipper(threading.Thread):
    """Follows one replica's log file until `finish()`, then ships what is left."""

    def __init__(self, client: redis.Redis, key: ReplicaKey, path: Path,
                 poll_seconds: float = POLL_SECONDS) -> None:
        super().__init__(daemon=True, name=f"logs-{key.job_id}-{key.attempt}-{key.index}")
        self.client = client
        self.key = key
        self.path = path
        self.poll_seconds = poll_seconds
        self.seq = 0  # lines shipped so far
        self._offset = 0
        self._partial = b""
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(self.poll_seconds):
            self._ship(self._read_lines(final=False))
        while True:  # the rest of the file, however much is left
            before = self._offset
            self._ship(self._read_lines(final=False))
            if self._offset == before:
                break
        self._ship(self._read_lines(final=True))

    def finish(self, timeout: float = 10.0) -> None:
        """The replica exited: ship the rest of the file (and a last unterminated line)."""
        self._done.set()
        self.join(timeout)

    def _read_lines(self, *, final: bool) -> list[list[object]]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self._offset)
                data = handle.read(READ_BYTES)
        except OSError:
            return []
        self._offset += len(data)
        data = self._partial + data
        parts = data.split(b"\n")
        self._partial = parts.pop()  # an unterminated last line waits for its end
        if final and self._partial:
            parts.append(self._partial)
            self._partial = b""
        now = time.time()
        lines = []
        for raw in parts:
            self.seq += 1
            lines.append([self.seq, now, raw.decode("utf-8", errors="replace").rstrip("\r")])
        return lines

    def _ship(self, lines: list[list[object]]) -> None:
        for start in range(0, len(lines), BATCH_LINES):
            payload = json.dumps({"job_id": self.key.job_id, "attempt": self.key.attempt,
                                  "replica": self.key.index,
                                  "lines": lines[start:start + BATCH_LINES]})
            for attempt in range(5):
                try:
                    self.client.xadd(LOGS_STREAM, {"data": payload}, maxlen=STREAM_MAXLEN,
                                     approximate=True)
                    break
                except redis.RedisError as exc:
                    if attempt == 4:
                        log.warning("dropping %d log lines of %s: %s",
                                    len(lines[start:start + BATCH_LINES]), self.key, exc)
                    time.sleep(0.2 * 2**attempt)
