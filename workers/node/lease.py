"""The node agent's lease: its right to run replicas, held only while Redis takes its beats.

The control plane declares a node lost once it has heard no heartbeat for NODE_TIMEOUT,
and then places the node's gangs again elsewhere. A gang must never run twice, so an
agent cut off from Redis (a partition: its processes alive, its network gone) must have
stopped its replicas, to the last process, before then. The rules, all here:

* The lease runs AGENT_LEASE from the moment the last heartbeat Redis took was *sent*:
  the control plane cannot have heard it earlier (services/cluster/arrivals.py times a
  beat by when it sees it), so the lease lapses before the node can be declared lost.
* It is watched on a thread of its own (`heartbeat.lease_loop`), never by the heartbeat
  call: on a cut link a Redis call blocks for its socket timeout and its retries (tens
  of seconds), far past any lease, and reports nothing meanwhile.
* When it lapses every replica gets SIGTERM, and SIGKILL `fence_grace` later: STOP_GRACE,
  but never more than half of what NODE_TIMEOUT leaves after AGENT_LEASE, so the last
  process is gone with a margin before the node is lost. A fenced replica could not
  report anything anyway; its gang resumes elsewhere from the last checkpoint.
* While it stays lapsed, whatever runs is stopped again at every check.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from services.settings import Settings

CHECK_EVERY = 0.1  # seconds between two looks at a lapsed lease


def fence_grace(settings: Settings) -> float:
    """Seconds between SIGTERM and SIGKILL for the replicas of an agent whose lease lapsed."""
    return max(0.0, min(settings.STOP_GRACE, (settings.NODE_TIMEOUT - settings.AGENT_LEASE) / 2))


class Lease:
    """AGENT_LEASE seconds from the sending of the last heartbeat Redis took."""

    def __init__(self, duration: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.duration = duration
        self._clock = clock
        self._lock = threading.Lock()
        # Held from the start: nothing runs here yet, and nothing starts without Redis
        # (a replica's claim is written there first).
        self._sent = clock()

    def now(self) -> float:
        """The lease's clock: read it just before sending a heartbeat."""
        return self._clock()

    def renew(self, sent: float) -> None:
        """A heartbeat sent at `sent` (`now()`) was taken by Redis."""
        with self._lock:
            self._sent = max(self._sent, sent)

    def left(self) -> float:
        """Seconds until the lease lapses (0 or less: lapsed)."""
        with self._lock:
            return self._sent + self.duration - self._clock()
