"""When the control plane last heard from each sender, on its own clock.

Liveness is judged here and nowhere else. A time a sender writes is its own clock's: an
agent five minutes behind would look silent for five minutes the moment it registered
(its node lost, its replicas hung), and one five minutes ahead would look alive five
minutes after it died. So a beat counts as heard when the scheduler *sees its value
change* (the nodes hash and the progress hash keep each sender's last beat; every beat's
value differs from the one before), timed by the scheduler's own clock. What the sender
wrote is an opaque token here, kept only to tell one beat from the next (and shown).

A leader's first read has no earlier one to compare with: a value may be a second or an
hour old. It counts as heard at that read, so a new leader does not declare every node
lost and every replica hung at once, but it is no news: it does not bring a lost node
back. A sender that never changes its value again is lost one timeout after that read,
never kept alive for ever.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Heard:
    """When the control plane first saw a sender's current beat (unix seconds, its clock)."""

    at: float
    # The read before the one that saw it: the beat was written after this time. None
    # when the value was there at the tracker's first read (its age is unknown).
    after: float | None

    @property
    def news(self) -> bool:
        """Whether the beat was written while the control plane was watching."""
        return self.after is not None


class Arrivals(Generic[K]):
    """The arrival times of the beats in one hash, read whole again and again."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._seen: dict[K, tuple[str, Heard]] = {}
        self._read_at: float | None = None  # the previous read, None before the first

    @property
    def read_at(self) -> float:
        """When the last read was observed (this tracker's clock; 0 before the first)."""
        return self._read_at or 0.0

    def observe(self, values: Mapping[K, str]) -> dict[K, Heard]:
        """Each sender's beat in `values` (the whole hash as just read) with when it
        was first seen; senders no longer in it are forgotten."""
        now = self._clock()
        fresh = Heard(at=now, after=self._read_at)  # one for every beat new in this read
        heard: dict[K, Heard] = {}
        seen: dict[K, tuple[str, Heard]] = {}
        known = self._seen
        for key, value in values.items():
            before = known.get(key)
            # Unchanged since the previous read: heard when first seen; else new now (or
            # this is the first read).
            when = before[1] if before is not None and before[0] == value else fresh
            heard[key] = when
            seen[key] = (value, when)
        self._seen, self._read_at = seen, now
        return heard
