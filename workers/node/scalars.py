"""Metrics and progress of one replica, shipped and beaten from what the agent reads.

`ScalarShipper` follows one replica through its files (`ReplicaFollower`,
workers/node/replica_files.py): every new point is shipped through a `MetricReporter` for
the replica (the same batches on `cohort:metrics` as the Keras callback's, epoch null),
and every sign of progress is sent as the replica's progress heartbeat, so the hang
watchdog sees a loop that imports nothing from Cohort. On an agent, the node's tick
drives it (workers/node/shipments.py): its reads, and its beats in the tick's shipment.

The replica's output (its log file growing) is beaten apart, on OUTPUT_HASH: the control
plane counts it as progress only once every replica of the gang has started
(services/cluster/running_checks.py), since TensorFlow keeps logging while a gang waits
for a peer that never joins, while a script that prints its epochs and nothing else is
the most common one there is.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from redis.exceptions import NoScriptError

from services.wire.batches import Point, ProgressBeat
from services.wire.keys import OUTPUT_HASH, PROGRESS_HASH, progress_field
from workers.node.replica_files import ReplicaFollower

log = logging.getLogger("cohort.scalars")

POLL_SECONDS = 0.5  # a shipper polling on its own: the agent's are the tick's (shipments.py)
BEAT_INTERVAL = 1.0  # seconds between two beats: the pace of the replica's own beats

# HSET only if newer: the runner may have dated a beat ahead (FINISH_GRACE while
# saving, a `{"beat": ...}` line in its metrics file), and no later beat may shorten that.
# ARGV[2] is the beat's `until` (this agent's clock: it only orders this replica's beats),
# ARGV[3] the value (ProgressBeat: "until ahead", a value's first word its `until`).
_BEAT_IF_NEWER = """
local held = redis.call('HGET', KEYS[1], ARGV[1])
local current = held and tonumber(string.match(held, '^%S+')) or 0
if tonumber(ARGV[2]) > current then redis.call('HSET', KEYS[1], ARGV[1], ARGV[3]) end
"""


class PointSender(Protocol):
    """Ships one replica's points: the replica's `MetricReporter` (cohort:metrics
    batches, retries, replay after a Redis restart). A protocol, not an import, as
    node code never imports replica code (the import-linter contracts)."""

    def add(
        self, step: int, epoch: int | None, name: str, value: Any, ts: float | None = None
    ) -> None: ...

    def maybe_flush(self, *, force: bool = False) -> None: ...

    def flush(self, *, wait: float = 0.0, lock_timeout: float = -1) -> bool: ...


class ScalarShipper(threading.Thread):
    """Follows one replica until `finish()`: ships its points through `reporter` and
    beats its progress (at most once per BEAT_INTERVAL, dated when it was seen).

    `poll_seconds=None`: the node's shipments tick polls it (`step`, once a second,
    workers/node/shipments.py) and its own thread only makes the last poll at `finish`:
    one thread's wake a second for all of the node's replicas, not one per replica
    twice a second."""

    def __init__(
        self,
        reporter: PointSender,
        client: Any,
        *,
        job_id: int,
        attempt: int,
        index: int,
        metrics_file: Path | None = None,
        tensorboard_dir: Path | None = None,
        watch_dirs: Sequence[Path] = (),
        output_file: Path | None = None,
        skip_existing: bool = True,
        poll_seconds: float | None = POLL_SECONDS,
    ) -> None:
        super().__init__(daemon=True, name=f"scalars-{job_id}-{attempt}-{index}")
        self.reporter = reporter
        self.key = (job_id, attempt, index)
        self.field = progress_field(job_id, attempt, index)
        self.poll_seconds = poll_seconds
        # The tick's polls are a second apart: each may beat (a limit of a second would
        # skip every other one as the tick drifts by a millisecond).
        self._beat_every = BEAT_INTERVAL if poll_seconds is not None else 0.0
        self.follower = ReplicaFollower(
            on_point=self._add,
            metrics_file=metrics_file,
            tensorboard_dir=tensorboard_dir,
            watch_dirs=watch_dirs,
            output_file=output_file,
            skip_existing=skip_existing,
        )
        self.beaten: float | None = None  # the progress time last sent
        self._beat_at = 0.0  # monotonic time of the last beat sent
        self.output_beaten = self.follower.output_bytes  # the output size last sent
        self._output_beat_at = 0.0
        self._done = threading.Event()
        self._client = client
        self._beat = client.register_script(_BEAT_IF_NEWER)

    def run(self) -> None:
        if self.poll_seconds is None:
            self._done.wait()  # polled by the node's tick until the replica exits
        else:
            while not self._done.wait(self.poll_seconds):
                self.step()
        self.step(final=True)
        self.reporter.flush(wait=5.0)

    def step(self, *, final: bool = False) -> None:
        """One poll of its own: read, beat if there was progress, flush if a batch is due."""
        self.read(final=final)
        self.beat()
        self.beat_output()
        self.reporter.maybe_flush()

    def read(self, *, final: bool = False) -> None:
        """Read the replica's files: new points to the reporter, the last progress seen."""
        try:
            self.follower.poll(final=final)
        except Exception:  # a reader bug must not end the thread: the loop goes on
            log.exception("reading the metrics of replica %s failed", self.field)

    def beat(self) -> None:
        """Send the last progress time as the replica's heartbeat, if it is new."""
        seen = self._progress_due()
        if seen is None:
            return
        try:
            self._beat(keys=[PROGRESS_HASH], args=self._beat_args(seen))
        except Exception as exc:  # a missed beat is sent at the next poll
            log.debug("progress beat of %s failed: %s", self.field, exc)
            return
        self.beaten, self._beat_at = seen, time.monotonic()

    def beat_output(self) -> None:
        """Send the replica's output size, if it grew (at most once per BEAT_INTERVAL):
        the control plane times its arrival by its own clock (arrivals.py)."""
        size = self._output_due()
        if size is None:
            return
        try:
            self._client.hset(OUTPUT_HASH, self.field, str(size))
        except Exception as exc:  # a missed beat is sent at the next poll
            log.debug("output beat of %s failed: %s", self.field, exc)
            return
        self.output_beaten, self._output_beat_at = size, time.monotonic()

    def queue_beats(self, pipe: Any) -> Callable[[Sequence[Any]], None] | None:
        """The node's tick (workers/node/shipments.py): queue on `pipe`, its shipment's
        MULTI, the beats `beat` and `beat_output` would send. Returns what to call with
        those commands' answers once the transaction ran (None: nothing queued); a beat
        not sent is queued again at the next tick."""
        seen, size = self._progress_due(), self._output_due()
        if seen is None and size is None:
            return None
        if seen is not None:
            # EVALSHA, not EVAL: an agent's ACL user may run only the scripts it loaded
            # (services/wire/acl.py), and a command it may not run aborts the whole MULTI.
            pipe.evalsha(self._beat.sha, 1, PROGRESS_HASH, *self._beat_args(seen))
        if size is not None:
            pipe.hset(OUTPUT_HASH, self.field, str(size))

        def answered(answers: Sequence[Any]) -> None:
            now, left = time.monotonic(), iter(answers)
            if seen is not None:
                answer = next(left)
                if isinstance(answer, NoScriptError):  # a new Redis: loaded for the next
                    self._load_beat_script()
                elif not isinstance(answer, Exception):
                    self.beaten, self._beat_at = seen, now
            if size is not None and not isinstance(next(left), Exception):
                self.output_beaten, self._output_beat_at = size, now

        return answered

    def _load_beat_script(self) -> None:
        try:
            self._client.script_load(self._beat.script)
        except Exception as exc:  # Redis away again: the next refusal loads it
            log.debug("loading the beat's script failed: %s", exc)

    def _progress_due(self) -> float | None:
        """The progress time to beat now, if it is new and no beat was sent too lately."""
        seen = self.follower.last_progress
        if seen is None or seen == self.beaten:
            return None
        if time.monotonic() - self._beat_at < self._beat_every:
            return None
        return seen

    def _beat_args(self, seen: float) -> list[str]:
        # How far ahead of now the beat vouches, as a duration: the control plane times
        # the beat by its own clock when it sees it (services/cluster/arrivals.py).
        field, value = ProgressBeat(
            *self.key, until=seen, ahead=max(0.0, seen - time.time())
        ).encode()
        return [field, repr(seen), value]

    def _output_due(self) -> int | None:
        size = self.follower.output_bytes
        if size == self.output_beaten or time.monotonic() - self._output_beat_at < self._beat_every:
            return None
        return size

    def finish(self, timeout: float = 10.0) -> None:
        """The replica exited: read what is left (an unterminated line too), ship it."""
        self._done.set()
        self.join(timeout)

    def _add(self, point: Point) -> None:
        self.reporter.add(*point)
