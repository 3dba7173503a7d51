"""What a sender keeps to send again after Redis lost its data.

Metric points (the replica's reporter) and log lines (the agent's shipper) sit in a
Redis stream until the scheduler leader stores them, within about a second. A Redis
that restarts without persistence comes back empty, as does one flushed (`FLUSHALL`) or
replaced by an empty server, and what it held is gone: so each sender remembers what it
sent in the last REPLAY_WINDOW seconds, notices the wipe by the generation marker
(services/wire/generation.py: not by `run_id`, which a flush keeps), and sends that
again. SQL's unique keys store it once. The senders of a replica outlive it by that
window (`AfterEnd`): a wipe just after its end must not erase its last points and lines.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import redis

from services.wire.generation import Generation

log = logging.getLogger("cohort.replay")

REPLAY_WINDOW = 30.0  # seconds: far longer than the ingest takes to store a batch
# The least time between two looks for a wipe while a replica runs: a shipper polls its
# file every 0.2 s, and a look each time was a Redis transaction per replica every 0.2 s,
# the most of what a training replica cost the agent and Redis. A look skipped loses
# nothing: the next one replays from the last look's time, covering the skipped spans.
# The looks after a replica's end (its last lines, AfterEnd's ticks) are never skipped:
# no later one would come.
CHECK_EVERY = 1.0

T = TypeVar("T")


class RecentlySent(Generic[T]):
    """Items sent to one Redis in the last `window` seconds, oldest first."""

    def __init__(
        self, window: float = REPLAY_WINDOW, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.window = window
        self._clock = clock
        self._items: collections.deque[tuple[float, T]] = collections.deque()
        self._generation = Generation()
        self._seen_at: float | None = None  # when that Redis last answered

    def add(self, item: T) -> None:
        self._items.append((self._clock(), item))

    def __bool__(self) -> bool:
        """Whether anything sent lately could still be lost to a wipe."""
        return bool(self._items)

    def lost_to_restart(self, client: Any, *, force: bool = False) -> list[T]:
        """The items sent in the window before the old data last answered, if Redis has
        lost its data since the last call (restarted, flushed, replaced; however long it
        was away), else []. Call it after a successful send (Redis answers). Looks at
        most every CHECK_EVERY seconds (a call sooner returns []) unless `force`d."""
        now = self._clock()
        if not force and self._seen_at is not None and now - self._seen_at < CHECK_EVERY:
            return []
        try:
            wiped = self._generation.check(client)
        except redis.RedisError:
            return []
        return self._looked(wiped, now)

    def lost_at(self, marker: bytes | str) -> list[T]:
        """As `lost_to_restart`, with the generation marker a transaction of another's
        read just now (the node's shipment, workers/node/shipments.py: one look for all
        of the node's replicas, inside the transaction that shipped their points)."""
        return self._looked(self._generation.saw(marker), self._clock())

    def _looked(self, wiped: bool, now: float) -> list[T]:
        lost: list[T] = []
        if wiped and self._seen_at is not None:
            lost = [item for sent, item in self._items if sent >= self._seen_at - self.window]
        self._seen_at = now
        while self._items and now - self._items[0][0] > self.window:
            self._items.popleft()
        return lost


class AfterEnd:
    """The senders of replicas that have ended, each kept for `window` seconds after.

    A replica's last points and log lines are sent just before its exit is reported, and
    the leader stores them a moment later. A wipe in that moment erases them, and the
    threads that would send them again (they look for a wipe at their next send) ended
    with the replica: the job can succeed with its last points never stored. So the
    agent keeps each ended replica's senders here and calls `tick()` with every
    heartbeat: each sends what it still holds unsent and, if Redis lost its data, what
    it sent in its last REPLAY_WINDOW seconds (SQL's unique keys store it once). After
    `window` seconds a sender is closed and forgotten: by then the leader has long
    stored what it sent.
    """

    def __init__(self, window: float = REPLAY_WINDOW) -> None:
        self.window = window
        self._held: list[tuple[float, Callable[[], object], Callable[[], object] | None]] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._held)

    def keep(
        self, send_again: Callable[[], object], close: Callable[[], object] | None = None
    ) -> None:
        """Hold a sender whose replica ended: `send_again` ships what it holds unsent and
        replays what a wipe erased; `close` releases it when its time is up."""
        with self._lock:
            self._held.append((time.monotonic() + self.window, send_again, close))

    def tick(self) -> None:
        """Give every held sender its chance; close and drop those past their window.
        A sender's failure (Redis away again) waits for the next tick."""
        now = time.monotonic()
        with self._lock:
            held = list(self._held)
            self._held = [entry for entry in held if entry[0] > now]
        for until, send_again, close in held:
            try:
                send_again()
            except Exception as exc:  # noqa: BLE001 - tried again at the next tick
                log.debug("sending again after a replica's end failed: %s", exc)
            if until <= now and close is not None:
                try:
                    close()
                except Exception:  # noqa: BLE001 - releasing is best effort
                    pass
