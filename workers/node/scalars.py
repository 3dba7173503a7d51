"""Metrics and progress of one replica, read from the files its training loop writes.

Whatever the loop (Keras fit, a custom `strategy.run` loop, any script), the agent
follows, for each replica it runs:

* the JSON lines `cohort.report()` (and Cohort's own runner: every `trainer` job's
  metrics and progress beats, workers/replica/report_writer.py) append to
  $COHORT_METRICS_FILE;
* the TensorBoard event files tf.summary writes anywhere under
  $COHORT_TENSORBOARD_DIR (a file in a subdirectory `train/` names its scalars
  `train/<tag>`, as TensorBoard shows runs);
* optionally some directories (checkpoints, the saved model) whose files changing
  shows the loop is alive.

Every new point is shipped through a `MetricReporter` for the replica (the same
batches on `cohort:metrics` as the Keras callback's, epoch null), and every sign of
progress is sent as the replica's progress heartbeat, so the hang watchdog sees a
loop that imports nothing from Cohort.

The replica's output (its log file growing) is beaten apart, on OUTPUT_HASH: the control
plane counts it as progress only once every replica of the gang has started
(services/cluster/running_checks.py), since TensorFlow keeps logging while a gang waits
for a peer that never joins, while a script that prints its epochs and nothing else is
the most common one there is.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from services.storage.owned_tree import OwnedTree
from services.wire.batches import Point, ProgressBeat
from services.wire.keys import OUTPUT_HASH, PROGRESS_HASH, progress_field
from workers.node.report_shipper import MetricsFileReader

if TYPE_CHECKING:
    from workers.node.tfevents import EventFileReader

log = logging.getLogger("cohort.scalars")

POLL_SECONDS = 0.5  # a shipper polling on its own: the agent's are the tick's (shipments.py)
BEAT_INTERVAL = 1.0  # seconds between two beats: the pace of the replica's own beats
MAX_EVENT_FILES = 1000  # followed per replica: a runaway writer cannot exhaust the agent
MAX_WATCHED_FILES = 10_000  # looked at per watched directory and poll
FILE_PREFIX = "events.out.tfevents."  # tf.summary's event files (tfevents.py reads them)

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


class ReplicaFollower:
    """Reads one replica's metrics file and TensorBoard directory, calls `on_point` for
    each new point, and keeps the time of the replica's last sign of progress."""

    def __init__(
        self,
        *,
        on_point: Callable[[Point], None],
        metrics_file: Path | None = None,
        tensorboard_dir: Path | None = None,
        watch_dirs: Sequence[Path] = (),
        output_file: Path | None = None,
        skip_existing: bool = True,
    ) -> None:
        """Create it before the replica starts: with `skip_existing`, what the files
        hold already (an earlier attempt in the same directory) is neither this
        replica's metrics nor its progress; only what is written after counts.
        `output_file`: the replica's log, whose size is its output so far."""
        self.on_point = on_point
        self.output_file = output_file
        self.output_bytes = _size(output_file) if output_file and skip_existing else 0
        self.metrics = MetricsFileReader(metrics_file) if metrics_file else None
        self.tensorboard_dir = tensorboard_dir
        self.event_files: dict[Path, EventFileReader] = {}
        self._too_many_files = False
        self.watch_dirs = list(watch_dirs)
        self._watched = self._watch_signature()  # files there before it ran are no sign
        self.points = 0  # points read in all
        self.last_progress: float | None = None  # unix time the last sign was seen
        if skip_existing:
            self._skip_existing()

    def _skip_existing(self) -> None:
        # TensorFlow never appends to an old event file (each writer makes its own),
        # so starting at their ends loses nothing the new process writes.
        for reader in [self.metrics, *self._event_readers()]:
            if reader is not None:
                reader.offset = _size(reader.path)

    def poll(self, *, final: bool = False) -> int:
        """Read what is new; returns the number of new points. `final`: the replica has
        exited, so a metrics line it left unterminated is read too."""
        progressed = False
        beats = self.metrics.beats if self.metrics else 0
        new = self.metrics.read(final=final) if self.metrics else []
        progressed |= bool(new) or (self.metrics is not None and self.metrics.beats > beats)
        for reader in self._event_readers():
            for event in reader.read():
                scalars = reader.scalars(event)
                new.extend(scalars)
                # Any summary is progress (histograms, images), not file headers.
                progressed |= bool(scalars or event.summary.value)
        signature = self._watch_signature()
        if signature != self._watched:
            self._watched, progressed = signature, True
        if self.output_file is not None:
            self.output_bytes = max(self.output_bytes, _size(self.output_file))
        for point in new:
            self.on_point(point)
        self.points += len(new)
        if progressed:
            # A beat may date the progress ahead (the runner's, while it saves).
            ahead = self.metrics.alive_until if self.metrics else 0.0
            self.last_progress = max(time.time(), ahead)
        return len(new)

    def _event_readers(self) -> list[EventFileReader]:
        if self.tensorboard_dir is not None:
            for path in _event_files(self.tensorboard_dir):
                if path not in self.event_files:
                    if len(self.event_files) >= MAX_EVENT_FILES:
                        if not self._too_many_files:
                            self._too_many_files = True
                            log.warning(
                                "%s: more than %d event files; following only the first",
                                self.tensorboard_dir,
                                MAX_EVENT_FILES,
                            )
                        break
                    # Here, not at the module's top: tensorboard's protos and
                    # tensor_util bring numpy and boto3, 0.24 CPU-s of the agent's
                    # import (docs/benchmarks.md, 2026-11-30), for the jobs that
                    # write event files alone.
                    from workers.node.tfevents import EventFileReader

                    self.event_files[path] = EventFileReader(
                        path,
                        prefix=_run_prefix(self.tensorboard_dir, path),
                        tree=OwnedTree(self.tensorboard_dir),
                    )
        return list(self.event_files.values())

    def _watch_signature(self) -> tuple[int, int, int]:
        """(files, newest mtime, total size) under the watched directories."""
        count = newest = total = 0
        for entry in _files_under(self.watch_dirs, MAX_WATCHED_FILES):
            try:
                stat = entry.stat(follow_symlinks=False)
            except OSError:
                continue  # removed since listed (a checkpoint manager rotating old ones)
            count, total = count + 1, total + stat.st_size
            newest = max(newest, stat.st_mtime_ns)
        return count, newest, total


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _files_under(roots: Iterable[Path], limit: int) -> Iterable[os.DirEntry[str]]:
    """Regular files under `roots`, links not followed (the replica owns these trees)."""
    seen = 0
    stack = [str(root) for root in roots]
    while stack and seen < limit:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif entry.is_file(follow_symlinks=False) and seen < limit:
                        seen += 1
                        yield entry
        except OSError:
            continue  # not there yet, or removed while listed


def _event_files(root: Path) -> list[Path]:
    found = [
        Path(entry.path)
        for entry in _files_under([root], MAX_EVENT_FILES * 10)
        if entry.name.startswith(FILE_PREFIX)
    ]
    return sorted(found)


def _run_prefix(root: Path, path: Path) -> str:
    """`train/` for root/train/events..., "" for a file directly under root."""
    run = path.parent.relative_to(root).as_posix()
    return "" if run == "." else f"{run}/"


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
        """One poll: read, beat if there was progress, flush if a batch is due."""
        try:
            self.follower.poll(final=final)
        except Exception:  # a reader bug must not end the thread: the loop goes on
            log.exception("reading the metrics of replica %s failed", self.field)
        self.beat()
        self.beat_output()
        self.reporter.maybe_flush()

    def beat(self) -> None:
        """Send the last progress time as the replica's heartbeat, if it is new."""
        seen = self.follower.last_progress
        if seen is None or seen == self.beaten:
            return
        if time.monotonic() - self._beat_at < self._beat_every:
            return
        # How far ahead of now the beat vouches, as a duration: the control plane times
        # the beat by its own clock when it sees it (services/cluster/arrivals.py).
        field, value = ProgressBeat(
            *self.key, until=seen, ahead=max(0.0, seen - time.time())
        ).encode()
        try:
            self._beat(keys=[PROGRESS_HASH], args=[field, repr(seen), value])
        except Exception as exc:  # a missed beat is sent at the next poll
            log.debug("progress beat of %s failed: %s", self.field, exc)
            return
        self.beaten, self._beat_at = seen, time.monotonic()

    def beat_output(self) -> None:
        """Send the replica's output size, if it grew (at most once per BEAT_INTERVAL):
        the control plane times its arrival by its own clock (arrivals.py)."""
        size = self.follower.output_bytes
        if size == self.output_beaten or time.monotonic() - self._output_beat_at < self._beat_every:
            return
        try:
            self._client.hset(OUTPUT_HASH, self.field, str(size))
        except Exception as exc:  # a missed beat is sent at the next poll
            log.debug("output beat of %s failed: %s", self.field, exc)
            return
        self.output_beaten, self._output_beat_at = size, time.monotonic()

    def finish(self, timeout: float = 10.0) -> None:
        """The replica exited: read what is left (an unterminated line too), ship it."""
        self._done.set()
        self.join(timeout)

    def _add(self, point: Point) -> None:
        self.reporter.add(*point)
