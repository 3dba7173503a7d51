"""A sender's look for a wipe of Redis (workers/node/replay.py RecentlySent): at most one
Redis transaction per CHECK_EVERY, and a look after skipped ones replays their spans."""

from __future__ import annotations

from typing import Any

from tests.fake_clock import Clock
from workers.node.replay import CHECK_EVERY, RecentlySent


class FakeRedis:
    """The generation key of one Redis, wiped on demand; counts the transactions."""

    def __init__(self) -> None:
        self.value: str | None = None
        self.transactions = 0

    def wipe(self) -> None:
        self.value = None

    def pipeline(self, transaction: bool = True) -> Any:
        redis = self

        class Pipe:
            def set(self, _key: str, value: str, nx: bool = False) -> None:
                if redis.value is None:
                    redis.value = value

            def get(self, _key: str) -> None:
                pass

            def execute(self) -> list[Any]:
                redis.transactions += 1
                return [True, redis.value]

        return Pipe()


def test_looks_come_at_most_every_check_every_seconds() -> None:
    redis, clock = FakeRedis(), Clock()
    recent: RecentlySent[int] = RecentlySent(window=30.0, clock=clock)
    recent.add(1)
    assert recent.lost_to_restart(redis) == []  # the first look: nothing known before it
    for _ in range(10):  # a shipper polling every 0.2 s with nothing new
        clock.now += 0.05
        assert recent.lost_to_restart(redis) == []
    assert redis.transactions == 1
    clock.now += CHECK_EVERY
    recent.lost_to_restart(redis)
    assert redis.transactions == 2


def test_a_wipe_seen_after_skipped_looks_replays_everything_since_the_last_look() -> None:
    redis, clock = FakeRedis(), Clock()
    recent: RecentlySent[int] = RecentlySent(window=30.0, clock=clock)
    recent.add(1)
    assert recent.lost_to_restart(redis) == []
    clock.now += 0.3
    recent.add(2)  # sent, then erased with the wipe below before the next look
    redis.wipe()
    clock.now += 0.3
    recent.add(3)  # sent to the new, empty Redis: kept, and sent again (stored once)
    assert recent.lost_to_restart(redis) == []  # too soon after the last look
    clock.now += CHECK_EVERY
    assert recent.lost_to_restart(redis) == [1, 2, 3]
    clock.now += CHECK_EVERY
    assert recent.lost_to_restart(redis) == []  # told once


def test_a_forced_look_is_never_skipped() -> None:
    # The looks after a replica's end: no later one would come to find the wipe.
    redis, clock = FakeRedis(), Clock()
    recent: RecentlySent[int] = RecentlySent(window=30.0, clock=clock)
    recent.add(1)
    assert recent.lost_to_restart(redis) == []
    redis.wipe()
    clock.now += 0.1
    assert recent.lost_to_restart(redis) == []  # skipped
    assert recent.lost_to_restart(redis, force=True) == [1]
    assert redis.transactions == 2
