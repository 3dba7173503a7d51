"""What a sender keeps to send again after a Redis restart.

Metric points (the replica's reporter) and log lines (the agent's shipper) sit in a
Redis stream until the scheduler leader stores them, within about a second. A Redis
that restarts without persistence comes back empty, and what it held is gone: so each
sender remembers what it sent in the last REPLAY_WINDOW seconds, notices the restart
by Redis' `run_id`, and sends that again. SQL's unique keys store it once.
"""

from __future__ import annotations

import collections
import time
from typing import Any, Generic, TypeVar

import redis

REPLAY_WINDOW = 30.0  # seconds: far longer than the ingest takes to store a batch

T = TypeVar("T")


class RecentlySent(Generic[T]):
    """Items sent to one Redis in the last `window` seconds, oldest first."""

    def __init__(self, window: float = REPLAY_WINDOW) -> None:
        self.window = window
        self._items: collections.deque[tuple[float, T]] = collections.deque()
        self._run_id: str | None = None
        self._seen_at = 0.0  # when that Redis last answered

    def add(self, item: T) -> None:
        self._items.append((time.monotonic(), item))

    def lost_to_restart(self, client: Any) -> list[T]:
        """The items sent in the window before the old Redis last answered, if Redis has
        restarted since the last call (however long it was away), else [].
        Call it after a successful send (Redis answers, so its `run_id` is readable)."""
        try:
            run_id = client.info("server").get("run_id")
        except redis.RedisError:
            return []
        now = time.monotonic()
        lost: list[T] = []
        if self._run_id is not None and run_id != self._run_id:
            lost = [item for sent, item in self._items if sent >= self._seen_at - self.window]
        self._run_id, self._seen_at = run_id, now
        while self._items and now - self._items[0][0] > self.window:
            self._items.popleft()
        return lost
