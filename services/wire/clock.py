"""Redis's clock, as each process reads it: the time signed messages are stamped with
and judged by (services/wire/signing.py, MESSAGE_MAX_AGE).

The scheduler seals a start message with a time and the agent refuses it once it is
older than MESSAGE_MAX_AGE. On their own wall clocks, an agent five minutes ahead would
find every message stale, and one five minutes behind every message from the future:
no job would ever start there. Both ends already reach the same Redis, so both read its
clock (TIME) and keep their offset from it: a message's age is then the same number
wherever it is judged, however wrong a host's clock is.

The offset is read again every RESYNC seconds (a host's clock may be stepped); while
Redis cannot be reached the last offset is kept (none yet: the local clock).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("cohort.clock")

RESYNC = 30.0  # seconds between two readings of Redis's TIME


class RedisClock:
    """Unix time on Redis's clock: the local clock plus its last measured offset."""

    def __init__(
        self,
        client: Any,
        *,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._wall = wall
        self._monotonic = monotonic
        self._offset = 0.0
        self._synced_at: float | None = None  # monotonic time of the last reading
        self._lock = threading.Lock()

    def now(self) -> float:
        """The current time on Redis's clock (as well as the last reading tells)."""
        with self._lock:
            due = self._synced_at is None or self._monotonic() - self._synced_at >= RESYNC
            if due:
                self._sync()
            return self._wall() + self._offset

    @property
    def offset(self) -> float:
        """Seconds Redis's clock is ahead of this host's (negative: behind)."""
        return self._offset

    def _sync(self) -> None:
        before = self._wall()
        try:
            seconds, micros = self._client.time()
        except Exception as exc:  # noqa: BLE001 - the last offset stands; retried later
            log.debug("could not read Redis's clock: %s", exc)
            self._synced_at = self._monotonic() - RESYNC + 1.0  # again in a second
            return
        after = self._wall()
        # The reply was made somewhere in the round trip: its middle is the best guess.
        self._offset = float(seconds) + float(micros) / 1e6 - (before + after) / 2
        self._synced_at = self._monotonic()
