"""The Redis data-generation marker (services/wire/generation.py) on a real Redis."""

from __future__ import annotations

import pytest
import redis

from services.wire.generation import Generation
from services.wire.keys import GENERATION_KEY


def test_every_watcher_notices_a_flush_once_whoever_writes_the_new_marker(bus: redis.Redis) -> None:
    agent, sender, leader = Generation(), Generation(), Generation()
    assert [w.check(bus) for w in (agent, sender, leader)] == [False, False, False]
    assert agent.seen == sender.seen == leader.seen == bus.get(GENERATION_KEY)
    bus.flushdb()  # the marker goes with everything else; the server stays
    # The first to look writes a new marker; the others find it changed.
    assert [w.check(bus) for w in (sender, agent, leader)] == [True, True, True]
    assert [w.check(bus) for w in (sender, agent, leader)] == [False, False, False]
    assert agent.seen == sender.seen == leader.seen == bus.get(GENERATION_KEY)


def test_a_watcher_that_cannot_reach_redis_learns_nothing(bus: redis.Redis) -> None:
    watcher = Generation()
    assert watcher.check(bus) is False
    seen = watcher.seen
    dead = redis.Redis(port=1, socket_connect_timeout=0.2)
    with pytest.raises(redis.ConnectionError):
        watcher.check(dead)
    assert watcher.seen == seen
    assert watcher.check(bus) is False  # the same data: no wipe to report
