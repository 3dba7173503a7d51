"""When the leader runs its next scheduling pass: wake-ups coalesced, with a bounded delay.

Every submission appends a `wake` event (services/wire/client.py wake_scheduler), and
every replica start or exit is an event too. Running a pass per batch of events would
make a burst of submissions cost one pass each over the whole queue, back to back, and
the scheduler would take a core from the api. Instead:

* a pass is *wanted* once an event arrives (or at start); it runs as soon as the gap
  after the previous pass has passed, and events arriving meanwhile join it;
* the gap is as long as the previous pass took (REST_RATIO of it), and at least
  MIN_GAP: during a burst the leader spends at most about half its time in passes,
  however fast events come, and a pass is wanted no longer than MIN_GAP or one pass's
  time (whichever is longer) before it starts;
* a lone event after a quiet spell finds the gap long passed: its pass starts at once,
  so a submission to an idle cluster is placed within milliseconds, as before;
* without events, a pass runs every `interval` seconds (SCHEDULER_INTERVAL) anyway: for
  what only time changes, the agents' heartbeats (every HEARTBEAT_INTERVAL, 2 s) and
  deadlines (a node's timeout, a restart's backoff, a cron fire time: seconds long).
  Its default is the heartbeats' pace, 2 s: at 1 s, an idle stack's passes were most of
  its own CPU (2.2 % of a core of the scheduler's; 1.45 % at 2 s; docs/benchmarks.md).

Events are still read and applied as they come (scheduler.py); only passes are paced.
"""

from __future__ import annotations

import time
from collections.abc import Callable

MIN_GAP = 0.05  # seconds: the least rest between two passes
REST_RATIO = 1.0  # rest after a pass, as a fraction of the time it took


class PassPacer:
    """Decides when the next pass is due; told when passes start and end."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.clock = clock
        self.wanted = True  # the first pass runs at once
        self.last_start = float("-inf")
        self.last_end = float("-inf")
        self.gap = MIN_GAP

    def want(self) -> None:
        """Something happened that a pass should act on."""
        self.wanted = True

    def due_in(self) -> float:
        """Seconds until the next pass is due; 0: now."""
        now = self.clock()
        periodic = self.last_start + self.interval - now
        if self.wanted:
            periodic = min(periodic, self.last_end + self.gap - now)
        return max(0.0, periodic)

    def started(self) -> None:
        """A pass starts: it sees everything that happened so far."""
        self.wanted = False
        self.last_start = self.clock()

    def finished(self) -> None:
        """The pass ended (or failed): rest in proportion to what it took."""
        self.last_end = self.clock()
        self.gap = max(MIN_GAP, REST_RATIO * (self.last_end - self.last_start))
