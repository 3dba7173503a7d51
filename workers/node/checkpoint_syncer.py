"""The thread that keeps a running replica's checkpoints mirrored to the artifact store."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from services.storage.owned_tree import OnSkip
from workers.node.checkpoint_mirror import CheckpointMirror

log = logging.getLogger("cohort.artifacts")

POLL_SECONDS = 1.0  # how often a running chief's checkpoint directory is looked at


class CheckpointSyncer(threading.Thread):
    """Calls `mirror.sync()` every `poll_seconds` until `finish()`, which syncs once more;
    each only while `superseded()` says its attempt is still the job's (it may raise:
    that poll sends nothing, and counts as a failure). `on_skip` hears of each file not
    sent (a link, ...), at every poll: the caller says it once."""

    def __init__(
        self,
        mirror: CheckpointMirror,
        *,
        name: str,
        poll_seconds: float = POLL_SECONDS,
        superseded: Callable[[], bool] = lambda: False,
        on_skip: OnSkip | None = None,
    ) -> None:
        super().__init__(daemon=True, name=name)
        self.mirror = mirror
        self.on_skip = on_skip
        self.poll_seconds = poll_seconds
        self.superseded = superseded
        self._done = threading.Event()
        self._failures = 0
        self._held = False  # said once that it sends no more

    def run(self) -> None:
        while not self._done.wait(self.poll_seconds):
            self.sync()

    def sync(self, *, checked: bool = False) -> None:
        """Send what changed; `checked`: the caller has just asked `superseded()`."""
        try:
            if not checked and self.superseded():
                if not self._held:
                    log.warning(
                        "%s: this attempt is no longer the job's; its checkpoints "
                        "are not sent over the store's",
                        self.mirror.prefix,
                    )
                    self._held = True
                return
            self.mirror.sync(self.on_skip)
            self._failures = 0
        except Exception as exc:  # noqa: BLE001 - the next poll tries again
            self._failures += 1
            if self._failures == 1 or self._failures % 60 == 0:
                log.warning(
                    "syncing the checkpoints of %s failed (%d in a row): %s",
                    self.mirror.prefix,
                    self._failures,
                    exc,
                )

    def finish(self, timeout: float, *, checked: bool = False) -> None:
        """The replica exited: stop polling, then send the last checkpoint (`checked`: the
        caller has just asked `superseded()`)."""
        self._done.set()
        if self.is_alive():
            self.join(timeout)
        self.sync(checked=checked)
