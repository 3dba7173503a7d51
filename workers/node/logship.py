"""Ship a replica's log file to the control plane, line by line, through Redis.

The agent starts one `LogShipper` thread per replica it spawns. It follows the
replica's log file (stdout and stderr), stamps each complete line with its number
and the time it was read, and appends batches to `cohort:logs` (a LogBatch,
services/wire/batches.py), where the scheduler leader stores them in SQL, once per number. So
logs survive the job's files and node, and the api never needs the agents' disks. A line
travels as a terminal shows it (log_text.py: a progress bar's last state); the file keeps
every byte.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from services.wire.batches import LogBatch
from services.wire.keys import LOGS_STREAM, STREAM_MAXLEN
from workers.node.launcher import ReplicaKey
from workers.node.log_text import screen_line
from workers.node.replay import REPLAY_WINDOW, RecentlySent

log = logging.getLogger("cohort.logship")

POLL_SECONDS = 0.2  # how often the file is checked: the live log lags by about this
BATCH_LINES = 500  # lines per stream entry
READ_BYTES = 1 << 20
MAX_BACKOFF = 5.0  # seconds between tries while Redis is unreachable


@dataclass(frozen=True)
class Line:
    start: int  # byte offset of the line in the file: where to read again from
    seq: int
    ts: float
    text: str


class LogShipper(threading.Thread):
    """Follows one replica's log file until `finish()`, then ships what is left.

    Nothing is dropped: the file is the buffer. A batch Redis refuses is read again from
    the file once Redis answers (each line keeps its number, so SQL stores it once), and
    after a Redis restart the lines of the last 30 s are shipped again (workers/node/replay.py).
    """

    def __init__(
        self,
        client: redis.Redis,
        key: ReplicaKey,
        path: Path,
        poll_seconds: float = POLL_SECONDS,
        replay_window: float = REPLAY_WINDOW,
    ) -> None:
        super().__init__(daemon=True, name=f"logs-{key.job_id}-{key.attempt}-{key.index}")
        self.client = client
        self.key = key
        self.path = path
        self.poll_seconds = poll_seconds
        self.seq = 0  # the number of the last line read
        self._offset = 0  # where the next line starts
        self.failures = 0  # Redis refusals in a row (0: shipping normally)
        self._done = threading.Event()
        self._recent: RecentlySent[Line] = RecentlySent(replay_window)  # batches' first lines

    def run(self) -> None:
        while not self._done.wait(self._pause()):
            self._ship_available(final=False)
        # The replica exited: the rest of the file, its unterminated last line included,
        # for as long as Redis takes to answer.
        while not self._ship_available(final=True):
            time.sleep(self._pause())

    def finish(self, timeout: float = 10.0) -> None:
        """The replica exited: ship the rest of the file (and a last unterminated line)."""
        self._done.set()
        self.join(timeout)

    def send_again(self) -> None:
        """After the replica ended and this thread shipped its last lines
        (workers/node/replay.py AfterEnd): what is still unshipped, and again the lines a
        wipe erased."""
        if not self.is_alive():  # else the thread still ships, and looks itself
            self._ship_available(final=True)

    def _pause(self) -> float:
        doubling: int = 2 ** min(self.failures, 16)  # failures >= 0
        return min(MAX_BACKOFF, self.poll_seconds * doubling)

    def _ship_available(self, *, final: bool) -> bool:
        """Ship what the file holds now; False if Redis refused (to be tried again)."""
        lines = self._read_lines(final=final)
        if not lines and self._recent:
            # Nothing new, yet lines shipped lately may be gone with a wipe: look, or a
            # log that has gone quiet (or ended) would keep its last lines lost.
            lines = self._replay_lost(force=final)
        while lines:
            if not self._ship(lines):
                return False
            lines = self._read_lines(final=final)
            if not lines and final and self._recent:
                lines = self._replay_lost(force=True)  # the replica's end: a last look
        return True

    def _replay_lost(self, *, force: bool = False) -> list[Line]:
        """The lines to ship again if Redis lost its data since the last look, else []."""
        lost = self._recent.lost_to_restart(self.client, force=force)
        if not lost:
            return []
        log.warning(
            "Redis lost its data: shipping the log lines of %s again from line %d",
            self.key,
            lost[0].seq,
        )
        self._rewind(lost[0])
        return self._read_lines(final=False)

    def _read_lines(self, *, final: bool) -> list[Line]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self._offset)
                data = handle.read(READ_BYTES)
        except OSError:
            return []
        parts = data.split(b"\n")
        rest = parts.pop()  # after the last newline: a line still being written
        at_end = len(data) < READ_BYTES  # this read reached the end of the file
        if rest and ((final and at_end) or (not parts and not at_end)):
            parts.append(rest)  # the end of the output, or a line longer than a read
            rest = b""
        now, lines, offset = time.time(), [], self._offset
        for raw in parts:
            self.seq += 1
            # The line as a terminal shows it: a progress bar's last state (log_text.py).
            text = screen_line(raw.decode("utf-8", errors="replace"))
            lines.append(Line(offset, self.seq, now, text))
            offset += len(raw) + 1
        self._offset += len(data) - len(rest)
        return lines

    def _rewind(self, line: Line) -> None:
        """Read again from `line` on."""
        self._offset, self.seq = line.start, line.seq - 1

    def _ship(self, lines: list[Line]) -> bool:
        for start in range(0, len(lines), BATCH_LINES):
            chunk = lines[start : start + BATCH_LINES]
            payload = LogBatch(
                self.key.job_id,
                self.key.attempt,
                self.key.index,
                [(line.seq, line.ts, line.text) for line in chunk],
            ).encode()
            try:
                self.client.xadd(
                    LOGS_STREAM, {"data": payload}, maxlen=STREAM_MAXLEN, approximate=True
                )
            except redis.RedisError as exc:
                self._rewind(chunk[0])
                self.failures += 1
                if self.failures == 1:
                    log.warning(
                        "could not ship log lines of %s (%s); trying again from line %d",
                        self.key,
                        exc,
                        chunk[0].seq,
                    )
                return False
            self._recent.add(chunk[0])
        if self.failures:
            log.info("log lines of %s reach Redis again", self.key)
        self.failures = 0
        lost = self._recent.lost_to_restart(self.client)
        if lost:
            log.warning(
                "Redis lost its data: shipping the log lines of %s again from line %d",
                self.key,
                lost[0].seq,
            )
            self._rewind(lost[0])
        return True
