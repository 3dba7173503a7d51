"""The node's metric shipments: the points of every replica an agent follows leave together.

Each replica the agent runs has its `MetricReporter` (workers/node/report_shipper.py),
which its follower fills at every read of the replica's files (workers/node/replica_files.py).
Shipped by each reporter at each 0.5-s poll, every replica's points were a stream entry
twice a second, and each entry woke the leader's ingest for a read and a fenced SQL
transaction of its own: the most of what a training job cost the stack
(docs/benchmarks.md). `Shipments` ships them once per SHIP_INTERVAL instead, every
reporter's points of the node in one MULTI/EXEC: Redis serves a reader blocked on the
stream only after EXEC, so the ingest takes a node's tick in one read and one
transaction, however many replicas the node runs. The tick reads each replica's files
first (its follower's `read`), so a point waits for one tick, not a poll and a tick.
The same transaction carries what the node would otherwise send a round trip each:
every replica's progress and output beats, and the look for a wipe of Redis (the
generation marker, services/wire/generation.py) that each reporter made after its own
shipments. A node following replicas sends Redis one transaction a second, whatever
their number; a frozen Redis costs its tick one timeout, not one per replica and beat.

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
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import redis

from services.wire.generation import read_marker
from services.wire.keys import METRICS_STREAM, STREAM_MAXLEN
from workers.node.report_shipper import MetricReporter

log = logging.getLogger("cohort.shipments")

# Seconds between two shipments: the lag of a point on the live feeds grows by at most
# this (it was the 0.5-s poll); what costs the ingest is per shipment, not per point.
SHIP_INTERVAL = 1.0


class Followed(Protocol):
    """A replica's follower as the tick drives it (workers/node/scalars.py ScalarShipper)."""

    def read(self) -> None:
        """Read the replica's files into its reporter (catches its own errors)."""

    def queue_beats(self, pipe: Any) -> Callable[[Sequence[Any]], None] | None:
        """Queue its due beats on the shipment's MULTI; what to call with their answers."""


class Shipments:
    """Ships the buffered points and the beats of the node's joined replicas every
    `interval` seconds, one MULTI/EXEC; a thread runs while any reporter is joined."""

    def __init__(self, client: Any, interval: float = SHIP_INTERVAL) -> None:
        """`client`: a Redis client as `report_shipper.connect` makes them."""
        self._client = client
        self.interval = interval
        # Each joined reporter, with the follower that fills it, if any.
        self._joined: dict[MetricReporter, Followed | None] = {}
        self._lock = threading.Lock()
        # Held through a tick's reads and its shipment: a replica's exit waits for them.
        self._ticking = threading.Lock()
        self._thread: threading.Thread | None = None

    def join(self, reporter: MetricReporter, follower: Followed | None = None) -> None:
        """Ship `reporter`'s points from the next tick on (it no longer flushes per poll);
        `follower`: what fills it (its replica's `ScalarShipper`), read at each tick
        before the shipment, whose beats go with it."""
        with self._lock:
            reporter.joint = True
            self._joined[reporter] = follower
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, daemon=True, name="metric-shipments"
                )
                self._thread.start()

    def leave(self, reporter: MetricReporter) -> None:
        """Stop shipping `reporter`'s points and reading its replica (it exited: its
        follower's last read and flush follow). Waits for a tick under way, so that last
        read never runs beside the tick's, nor its last beats before the tick's."""
        with self._ticking, self._lock:
            self._joined.pop(reporter, None)
            reporter.joint = False

    def _run(self) -> None:
        while True:
            time.sleep(self.interval)
            with self._lock:
                if not self._joined:
                    self._thread = None  # under the lock: a join now starts a new thread
                    return
            try:
                with self._ticking:
                    self.poll()
                    self.ship()
            except Exception:  # noqa: BLE001 - the thread must outlive a bad shipment
                log.exception("shipping the node's metric points failed; retrying")

    def poll(self) -> None:
        """Read every joined replica's files."""
        for follower in self._followers():
            follower.read()

    def ship(self) -> int:
        """One shipment: every joined replica's due beats and its reporter's buffered
        points, one entry per chunk, in one MULTI/EXEC. Returns the entries shipped; on a
        failure every reporter keeps its points and pauses as after a failed flush of its
        own, and the beats are queued again at the next tick."""
        with self._lock:
            reporters = list(self._joined)
        pipe = self._client.pipeline(transaction=True)
        beaten = []  # each follower's callback, with where its commands are in the MULTI
        for follower in self._followers():
            first = len(pipe)
            if (answered := follower.queue_beats(pipe)) is not None:
                beaten.append((answered, first, len(pipe)))
        with contextlib.ExitStack() as held:
            due = [
                (reporter, entries)
                for reporter in reporters
                if held.enter_context(reporter.held())
                for entries in [reporter.due_entries()]
                if entries
            ]
            if not due and not beaten:
                return 0
            shipment = len(pipe)  # the entries and the marker's read from here
            for _, entries in due:
                for _, payload in entries:
                    pipe.xadd(
                        METRICS_STREAM, {"data": payload}, maxlen=STREAM_MAXLEN, approximate=True
                    )
            # The wipe look of every reporter that ships, in the same transaction: one
            # for the node, not one per replica after its entries.
            read_marker(pipe)
            try:
                # A command refused inside EXEC (a beat's script missing from a new
                # Redis) fails alone, the others run: each part reads its own answers.
                answers = pipe.execute(raise_on_error=False)
                for answer in answers[shipment:]:
                    if isinstance(answer, Exception):
                        raise answer
            except redis.RedisError as exc:
                for reporter, _ in due:
                    reporter.not_shipped(exc)
                return 0
            for answered, first, end in beaten:
                answered(answers[first:end])
            marker = answers[-1]
            for reporter, entries in due:
                reporter.shipped([chunk for chunk, _ in entries], marker)
            return sum(len(entries) for _, entries in due)

    def _followers(self) -> list[Followed]:
        with self._lock:
            return [one for one in self._joined.values() if one is not None]
