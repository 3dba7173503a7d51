"""The thread that copies a running replica's TensorBoard directory to the store as it grows.

So the event files (and profiles) of a job are in the store while it runs, not only after
its replicas exit: `cohort tensorboard` follows them from there (cli/tensorboard.py). Each
look sends only the files that changed since the last (TreeSync, through the replica's
`OwnedTree`: no link followed, only the job's own regular files); an event file that grew
is sent whole, as the store has no append.
"""

from __future__ import annotations

import logging
import threading

from services.storage import keys
from services.storage.owned_tree import OwnedTree
from services.storage.store import ArtifactStore

log = logging.getLogger("cohort.artifacts")


class BoardSyncer(threading.Thread):
    """Sends what changed under `tree` to `jobs/<id>/tensorboard/replica-<i>/` every
    `poll_seconds` (the agent's TENSORBOARD_SYNC_INTERVAL, 10 s: TensorBoard reloads every
    5, tf.summary flushes every 2 to 120) until `finish()` (the exit's own upload sends
    the rest)."""

    def __init__(
        self,
        store: ArtifactStore,
        job_id: int,
        index: int,
        tree: OwnedTree,
        *,
        poll_seconds: float,
    ) -> None:
        super().__init__(daemon=True, name=f"tensorboard-{job_id}-{index}")
        self.store, self.tree = store, tree
        self.prefix = keys.tensorboard_prefix(job_id, index)
        self.poll_seconds = poll_seconds
        self._done = threading.Event()
        self._failures = 0

    def run(self) -> None:
        while not self._done.wait(self.poll_seconds):
            self.sync()

    def sync(self) -> list[str]:
        """Send what changed; the paths sent (none when it failed: logged, tried again)."""
        try:
            if not self.tree.files():  # nothing written yet: no listing of the store
                return []
            sent = self.store.put_tree(self.prefix, self.tree)
            self._failures = 0
            return sent
        except Exception as exc:  # noqa: BLE001 - the next look tries again
            self._failures += 1
            if self._failures == 1 or self._failures % 60 == 0:
                log.warning(
                    "syncing the TensorBoard files of %s failed (%d in a row): %s",
                    self.prefix,
                    self._failures,
                    exc,
                )
            return []

    def finish(self, timeout: float) -> None:
        """The replica exited: stop looking (the caller sends the last files)."""
        self._done.set()
        if self.is_alive():
            self.join(timeout)
