"""What a replica's files say: the points and the signs of progress the agent reads.

Whatever the loop (Keras fit, a custom `strategy.run` loop, any script), the agent
follows, for each replica it runs:

* the JSON lines `cohort.report()` (and Cohort's own runner: every `trainer` job's
  metrics and progress beats, workers/replica/report_writer.py) append to
  $COHORT_METRICS_FILE;
* the TensorBoard event files tf.summary writes anywhere under
  $COHORT_TENSORBOARD_DIR (a file in a subdirectory `train/` names its scalars
  `train/<tag>`, as TensorBoard shows runs);
* optionally some directories (checkpoints, the saved model) whose files changing
  shows the loop is alive;
* the replica's output (its log file), whose size is beaten apart (workers/node/scalars.py).

`ReplicaFollower` reads them all; the replica owns them (a lower trust zone), so its
links are never followed and what it may make the agent read is bounded.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from services.storage.owned_tree import OwnedTree
from services.wire.batches import Point
from workers.node.report_shipper import MetricsFileReader

if TYPE_CHECKING:
    from workers.node.tfevents import EventFileReader

log = logging.getLogger("cohort.replica_files")

MAX_EVENT_FILES = 1000  # followed per replica: a runaway writer cannot exhaust the agent
MAX_WATCHED_FILES = 10_000  # looked at per watched directory and poll
FILE_PREFIX = "events.out.tfevents."  # tf.summary's event files (tfevents.py reads them)


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
