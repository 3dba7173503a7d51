"""One leadership term of the scheduler: its fencing token and whether it still lasts.

Every thread of a term (the loop, the ingesters) writes through its fence and stops once
the term ends; a term ends when the lock is lost, when SQL refuses its token (a newer
leader took over while this one was stalled: services/cluster/fencing.py), or at shutdown.
A later term of the same process is a new object, so a thread of an old term never
carries on into it.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from services.cluster.fencing import Fence

log = logging.getLogger("cohort.scheduler")


def _started() -> threading.Event:
    event = threading.Event()
    event.set()
    return event


@dataclass(frozen=True)
class Term:
    fence: Fence
    leading: threading.Event = field(default_factory=_started)

    def step_down(self, why: str) -> None:
        """End the term, saying why: each of its threads stops at its next check."""
        if self.leading.is_set():
            log.warning("stepping down: %s", why)
        self.leading.clear()

    def sleep(self, seconds: float) -> None:
        """Sleep up to `seconds`, waking early when the term ends."""
        deadline = time.monotonic() + seconds
        while self.leading.is_set() and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, 0.25))
