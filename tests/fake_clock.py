"""A clock a unit test sets by hand: `clock.now += 0.5` (unit tests may fake the clock)."""

from __future__ import annotations


class Clock:
    """Stands for `time.monotonic`: a callable returning `now`, which the test moves."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
