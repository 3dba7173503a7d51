"""The node's metric shipments: the points of every replica an agent follows leave together.

Each replica the agent runs has its `MetricReporter` (workers/node/report_shipper.py),
which its follower fills at every poll of the replica's files (workers/node/scalars.py).
Shipped by each reporter at each 0.5-s poll, every replica's points were a stream entry
twice a second, and each entry woke the leader's ingest for a read and a fenced SQL
transaction of its own: the most of what a training job cost the stack
(docs/benchmarks.md). `Shipments` ships them once per SHIP_INTERVAL instead, every
reporter's points of the node in one MULTI/EXEC: Redis serves a reader blocked on the
stream only after EXEC, so the ingest takes a node's tick in one read and one
transaction, however many replicas the node runs. The tick polls each replica's files
first (its follower's `step`), so a point waits for one tick, not a poll and a tick.

Nothing that waits for points is held to the tick: a replica's exit flushes its
reporter itself before the exit is reported (workers/node/sidecar.py), as the replay
after a wipe does (workers/node/replay.py). A reporter flushing on its own is skipped
by the tick, whose next turn finds its buffer empty or takes what is left.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from services.wire.keys import METRICS_STREAM, STREAM_MAXLEN
from workers.node.report_shipper import MetricReporter

log = logging.getLogger("cohort.shipments")

# Seconds between two shipments: the lag of a point on the live feeds grows by at most
# this (it was the 0.5-s poll); what costs the ingest is per shipment, not per point.
SHIP_INTERVAL = 1.0


class Shipments:
    """Ships the buffered points of the node's joined reporters every `interval` seconds,
    one MULTI/EXEC of their entries; a thread runs while any reporter is joined."""

    def __init__(self, client: Any, interval: float = SHIP_INTERVAL) -> None:
        """`client`: a Redis client as `report_shipper.connect` makes them."""
        self._client = client
        self.interval = interval
        self._reporters: list[MetricReporter] = []
        self._polls: dict[MetricReporter, Callable[[], None]] = {}
        self._lock = threading.Lock()
        self._polling = threading.Lock()  # held while the tick polls the replicas' files
        self._thread: threading.Thread | None = None

    def join(self, reporter: MetricReporter, poll: Callable[[], None] | None = None) -> None:
        """Ship `reporter`'s points from the next tick on (it no longer flushes per poll);
        `poll`: what fills it (its replica's follower's `step`), called at each tick
        before the shipment."""
        with self._lock:
            reporter.joint = True
            self._reporters.append(reporter)
            if poll is not None:
                self._polls[reporter] = poll
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, daemon=True, name="metric-shipments"
                )
                self._thread.start()

    def leave(self, reporter: MetricReporter) -> None:
        """Stop shipping `reporter`'s points and polling its replica (it exited: its
        follower's last poll and flush follow). Waits for a poll under way, so that last
        poll never runs beside the tick's."""
        with self._polling, self._lock:
            if reporter in self._reporters:
                self._reporters.remove(reporter)
            self._polls.pop(reporter, None)
            reporter.joint = False

    def _run(self) -> None:
        while True:
            time.sleep(self.interval)
            with self._lock:
                if not self._reporters:
                    self._thread = None  # under the lock: a join now starts a new thread
                    return
            try:
                self.poll()
                self.ship()
            except Exception:  # noqa: BLE001 - the thread must outlive a bad shipment
                log.exception("shipping the node's metric points failed; retrying")

    def poll(self) -> None:
        """Poll every joined replica's files (each follower catches its own errors)."""
        with self._polling:
            with self._lock:
                polls = list(self._polls.values())
            for poll in polls:
                poll()

    def ship(self) -> int:
        """One shipment: every joined reporter's buffered points, one entry per chunk, in
        one MULTI/EXEC. Returns the entries shipped; on a failure every reporter keeps
        its points and pauses as after a failed flush of its own."""
        with self._lock:
            reporters = list(self._reporters)
        with contextlib.ExitStack() as held:
            due = [
                (reporter, entries)
                for reporter in reporters
                if held.enter_context(reporter.held())
                for entries in [reporter.due_entries()]
                if entries
            ]
            if not due:
                return 0
            pipe = self._client.pipeline(transaction=True)
            for _, entries in due:
                for _, payload in entries:
                    pipe.xadd(
                        METRICS_STREAM, {"data": payload}, maxlen=STREAM_MAXLEN, approximate=True
                    )
            try:
                pipe.execute()
            except redis.RedisError as exc:
                for reporter, _ in due:
                    reporter.not_shipped(exc)
                return 0
            for reporter, entries in due:
                reporter.shipped([chunk for chunk, _ in entries])
            return sum(len(entries) for _, entries in due)
