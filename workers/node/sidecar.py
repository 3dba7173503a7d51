"""What the agent does beside each replica it runs, whatever the replica's loop.

* Before a replica of a new attempt starts here: the job's newest checkpoint is
  restored from the artifact store (once per node and attempt; workers/node/checkpoint_mirror.py).
* While it runs: its metrics file and TensorBoard event files are followed, and any sign
  of progress is beaten (workers/node/scalars.py); its points and beats leave with the
  node's other replicas' once a second (workers/node/shipments.py); its TensorBoard
  directory is copied to the store as it grows (workers/node/board_syncer.py), for
  `cohort tensorboard` to follow; replica 0 (the chief, which owns the real checkpoint)
  mirrors the checkpoint directory to the store, while its attempt is still the job's
  (workers/node/attempts.py).
* When it exits, before the exit is reported: the last points, a final checkpoint sync,
  the chief's saved model, the replica's last TensorBoard files and its log file go to the
  store (jobs/<id>/...), so a job that is `succeeded` has its model downloadable (the
  checkpoint and model only if Redis says the attempt is still the job's). That
  takes at most EXIT_UPLOAD_TIMEOUT; past it the exit is reported anyway, the uploads
  go on in the background, and every failure is logged.

The checkpoint, model and TensorBoard directories are the replica's: they are read
through an `OwnedTree` (no link followed, only regular files of the directory's owner,
the job's uid), and a file refused is said once in the replica's log (`LogNotes`), by
its path in the job's directory, so the job's user learns why it is not in the store.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from services.settings import Settings
from services.storage import keys
from services.storage.owned_tree import OnSkip, OwnedTree
from services.storage.store import ArtifactStore, open_store
from services.wire.replica import ReplicaSpec
from workers import layout
from workers.node.attempts import superseded
from workers.node.board_syncer import BoardSyncer
from workers.node.checkpoint_mirror import CheckpointMirror
from workers.node.checkpoint_syncer import CheckpointSyncer
from workers.node.launcher import ReplicaKey
from workers.node.report_shipper import MetricReporter, connect
from workers.node.scalars import ScalarShipper
from workers.node.shipments import Shipments

log = logging.getLogger("cohort.artifacts")

EXIT_UPLOAD_TIMEOUT = 120.0  # seconds the exit report may wait for the uploads
CHIEF = 0  # the replica whose checkpoint and model are the job's


class Sidecars:
    """The node's side of every replica: the store, each job's checkpoint mirror."""

    def __init__(
        self,
        settings: Settings,
        client: Any,
        store_factory: Callable[[], ArtifactStore] | None = None,
    ) -> None:
        self.settings = settings
        self.client = client
        self.data_dir = Path(settings.data_dir)
        self._open_store = store_factory or (lambda: open_store(settings=settings))
        self._store: ArtifactStore | None = None
        self._lock = threading.Lock()
        self._mirrors: dict[int, CheckpointMirror] = {}
        self._job_locks: dict[int, threading.Lock] = {}
        self._restored: set[tuple[int, int]] = set()
        self._followed: dict[ReplicaKey, ReplicaSidecar] = {}
        # Every followed replica's points, shipped together (no connection until then).
        self.shipments = Shipments(connect(settings.redis_url))

    def store(self) -> ArtifactStore | None:
        """The artifact store (opened on first use; None, logged, if it cannot be)."""
        with self._lock:
            if self._store is None:
                try:
                    self._store = self._open_store()
                except Exception:
                    log.exception(
                        "cannot open the artifact store: checkpoints, models and "
                        "logs stay on this node"
                    )
            return self._store

    def mirror(self, job_id: int) -> CheckpointMirror | None:
        store = self.store()
        if store is None:
            return None
        with self._lock:
            if job_id not in self._mirrors:
                self._mirrors[job_id] = CheckpointMirror(
                    store, job_id, layout.checkpoint_dir(self.data_dir, job_id)
                )
            return self._mirrors[job_id]

    def prepare(self, spec: ReplicaSpec) -> None:
        """Restore the job's newest checkpoint here before the first replica of this
        attempt starts (the others wait for it); errors are logged, never raised."""
        key = ReplicaKey.of(spec)
        with self._lock:
            job_lock = self._job_locks.setdefault(key.job_id, threading.Lock())
        with job_lock:
            if (key.job_id, key.attempt) in self._restored:
                return
            self._restored.add((key.job_id, key.attempt))
            mirror = self.mirror(key.job_id)
            if mirror is None:
                return
            started = time.monotonic()
            try:
                written = mirror.restore(store_wins=spec.replicas > 1)
            except Exception:
                log.exception(
                    "restoring the checkpoint of job %d failed: attempt %d starts "
                    "from what this node holds",
                    key.job_id,
                    key.attempt,
                )
                return
            if written:
                log.info(
                    "restored %d checkpoint files of job %d for attempt %d in %.2fs",
                    len(written),
                    key.job_id,
                    key.attempt,
                    time.monotonic() - started,
                )

    def follow(self, key: ReplicaKey) -> ReplicaSidecar:
        """Make the sidecar of replica `key` before its process starts, so what its files
        hold already (an earlier attempt here) counts for nothing."""
        sidecar = ReplicaSidecar(self, key)
        with self._lock:
            self._followed[key] = sidecar
        return sidecar

    def start(self, key: ReplicaKey) -> None:
        """Its process started: follow it."""
        with self._lock:
            sidecar = self._followed.get(key)
        if sidecar is not None:
            sidecar.start()

    def discard(self, key: ReplicaKey) -> None:
        """Its process could not be started."""
        with self._lock:
            sidecar = self._followed.pop(key, None)
        if sidecar is not None:
            sidecar.reporter.close()

    def finish(
        self, key: ReplicaKey, log_path: Path, timeout: float = EXIT_UPLOAD_TIMEOUT
    ) -> ReplicaSidecar | None:
        """Its process exited: the last points and the uploads, before the exit is
        reported (at most `timeout`; errors are logged). Returns its sidecar, whose
        reporter the caller closes (the agent, once past the replay window:
        workers/node/replay.py AfterEnd)."""
        with self._lock:
            sidecar = self._followed.pop(key, None)
        if sidecar is not None:
            sidecar.finish(log_path, timeout)
        return sidecar


class ReplicaSidecar:
    """Follows one replica from just before its start to its exit."""

    def __init__(self, node: Sidecars, key: ReplicaKey) -> None:
        self.node, self.key = node, key
        data_dir, job = node.data_dir, key.job_id
        self.checkpoint_dir = layout.checkpoint_dir(data_dir, job)
        self.model_dir = layout.model_dir(data_dir, job)
        self.tensorboard_dir = layout.tensorboard_dir(data_dir, job, key.index)
        self.notes = LogNotes(
            layout.log_file(data_dir, job, key.attempt, key.index), layout.job_dir(data_dir, job)
        )
        self.reporter = MetricReporter.from_url(
            node.settings.redis_url, job_id=job, attempt=key.attempt, replica=key.index
        )
        self.shipper = ScalarShipper(
            self.reporter,
            node.client,
            job_id=job,
            attempt=key.attempt,
            index=key.index,
            metrics_file=layout.metrics_file(data_dir, job, key.attempt, key.index),
            tensorboard_dir=self.tensorboard_dir,
            watch_dirs=(self.checkpoint_dir, self.model_dir),
            output_file=layout.log_file(data_dir, job, key.attempt, key.index),
            poll_seconds=None,  # polled by the node's shipments tick
        )
        board = OwnedTree(self.tensorboard_dir, on_skip=self.notes.skipper(self.tensorboard_dir))
        store = node.store()
        every = node.settings.TENSORBOARD_SYNC_INTERVAL
        self.board = (
            None if store is None else BoardSyncer(store, job, key.index, board, poll_seconds=every)
        )
        mirror = node.mirror(job) if key.index == CHIEF else None
        self.syncer = (
            None
            if mirror is None
            else CheckpointSyncer(
                mirror,
                name=f"checkpoints-{job}-{key.attempt}-{key.index}",
                superseded=lambda: superseded(node.client, job, key.attempt),
                on_skip=self.notes.skipper(self.checkpoint_dir),
            )
        )

    def start(self) -> None:
        self.node.shipments.join(self.reporter, self.shipper)
        self.shipper.start()
        for thread in (self.syncer, self.board):
            if thread is not None:
                thread.start()

    def finish(self, log_path: Path, timeout: float = EXIT_UPLOAD_TIMEOUT) -> None:
        """The replica exited: ship the last points, upload its artifacts (bounded).
        The reporter stays open: a wipe of Redis right after may erase its last points."""
        self.node.shipments.leave(self.reporter)  # its last points go now, not at a tick
        self.shipper.finish()
        started = time.monotonic()
        name = f"uploads-{self.key.job_id}-{self.key.attempt}-{self.key.index}"
        uploads = threading.Thread(target=self._upload, args=(log_path, timeout), name=name)
        uploads.daemon = True
        uploads.start()
        uploads.join(timeout)
        if uploads.is_alive():
            log.error(
                "the uploads of %s take over %.0fs: its exit is reported now and they go on",
                self.key,
                timeout,
            )
        else:
            log.info("uploaded the artifacts of %s in %.2fs", self.key, time.monotonic() - started)

    def _upload(self, log_path: Path, timeout: float) -> None:
        store = self.node.store()
        if store is None:
            return
        job, index = self.key.job_id, self.key.index
        steps: list[tuple[str, Callable[[], object]]] = []
        syncer = self.syncer
        if syncer is not None and self._still_the_jobs(time.monotonic() + timeout):
            steps.append(("the last checkpoint", lambda: syncer.finish(timeout, checked=True)))
            model = OwnedTree(self.model_dir, on_skip=self.notes.skipper(self.model_dir))
            if model.files():
                steps.append(
                    (
                        "the model",
                        lambda: store.put_tree(keys.model_prefix(job), model, mirror=True),
                    )
                )
        elif syncer is not None:
            syncer.finish(timeout)  # stops polling; sends nothing while superseded
        board = OwnedTree(self.tensorboard_dir, on_skip=self.notes.skipper(self.tensorboard_dir))
        if self.board is not None:
            self.board.finish(timeout)  # its last look done: what changed since, below
        if board.files():
            steps.append(
                (
                    "the TensorBoard files",
                    lambda: store.put_tree(keys.tensorboard_prefix(job, index), board),
                )
            )
        if log_path.is_file():
            steps.append(
                (
                    "the log",
                    lambda: store.put_file(keys.log_key(job, self.key.attempt, index), log_path),
                )
            )
        for what, step in steps:
            try:
                step()
            except Exception:  # noqa: BLE001 - one failed upload must not skip the others
                log.exception("uploading %s of %s failed", what, self.key)

    def _still_the_jobs(self, deadline: float) -> bool:
        """Whether this replica's attempt is still the job's, asked of Redis until it
        answers or `deadline` (monotonic) passes. The job's checkpoint and model in the
        store are the current attempt's: a chief torn down and placed again elsewhere (it
        froze, its node was cut off) must not send its late ones over them. Not knowing
        (Redis out of reach, as from a cut-off node) sends nothing either."""
        job, attempt = self.key.job_id, self.key.attempt
        while True:
            try:
                if superseded(self.node.client, job, attempt):
                    log.warning(
                        "attempt %d is no longer job %d's: its last checkpoint and "
                        "model are not sent over the store's",
                        attempt,
                        job,
                    )
                    return False
                return True
            except Exception as exc:  # noqa: BLE001 - redis-py's errors: ask again
                if time.monotonic() >= deadline:
                    log.error(
                        "%s: Redis did not say whether attempt %d is still job %d's "
                        "(%s): its last checkpoint and model are not sent",
                        self.key,
                        attempt,
                        job,
                        exc,
                    )
                    return False
                time.sleep(0.5)


class LogNotes:
    """Lines the agent adds to one replica's log, which its job's user reads (shipped with
    the replica's own lines while it runs, in the stored log file after): each file the
    uploads refuse, once, by its path in the job's directory (never the node's)."""

    def __init__(self, log_path: Path, job_dir: Path) -> None:
        self.log_path, self.job_dir = log_path, job_dir
        self._said: set[str] = set()
        self._lock = threading.Lock()

    def skipper(self, tree: Path) -> OnSkip:
        """An `on_skip` for the directory `tree` of the job."""
        head = tree.relative_to(self.job_dir).as_posix()
        return lambda rel, why: self.refused(f"{head}/{rel}", why)

    def refused(self, rel: str, why: str) -> None:
        with self._lock:
            if rel in self._said:
                return  # polled every second: once is enough
            self._said.add(rel)
        line = (
            f"cohort agent: {rel} is not uploaded: {why} (only regular files of the "
            "job's own user are, never through a link)"
        )
        log.warning("job %s: %s", self.job_dir.name, line)
        try:
            # The logs directory is the agent's alone; still, never write through a link.
            fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
        except OSError:
            return  # no log file (the replica never started): the agent's log has it
        try:
            os.write(fd, f"{line}\n".encode())
        finally:
            os.close(fd)
