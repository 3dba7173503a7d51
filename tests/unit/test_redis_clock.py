"""Signed messages are stamped and judged on Redis's clock (TIME), whatever a host's own
clock says: a host five minutes off reads the same time as Redis, within a round trip.
The hosts' clocks are faked here; tests/faults/test_clock_skew.py skews real agents."""

from __future__ import annotations

import pytest

from services.wire import clock as clock_module
from services.wire.clock import RedisClock
from services.wire.replica import STOP_TASK, StopReplica
from services.wire.signing import Refused, node_key, seal_message, unseal

KEY = node_key("s" * 40, "node-a")


class Host:
    """A host's wall clock `skew` seconds off Redis's, and a monotonic clock."""

    def __init__(self, skew: float) -> None:
        self.redis_now = 1_700_000_000.0
        self.skew = skew
        self.mono = 0.0

    def wall(self) -> float:
        return self.redis_now + self.skew

    def advance(self, seconds: float) -> None:
        self.redis_now += seconds
        self.mono += seconds


class FakeRedis:
    def __init__(self, host: Host) -> None:
        self.host = host
        self.calls = 0
        self.down = False

    def time(self) -> tuple[int, int]:
        self.calls += 1
        if self.down:
            raise ConnectionError("redis is down")
        now = self.host.redis_now
        return int(now), round((now - int(now)) * 1e6)


def clock_of(host: Host) -> tuple[RedisClock, FakeRedis]:
    client = FakeRedis(host)
    return RedisClock(client, wall=host.wall, monotonic=lambda: host.mono), client


@pytest.mark.parametrize("skew", [-300.0, 0.0, 300.0])
def test_a_host_reads_redis_time_whatever_its_own_clock_says(skew: float) -> None:
    host = Host(skew)
    clock, _ = clock_of(host)
    assert clock.now() == pytest.approx(host.redis_now, abs=1e-3)
    assert clock.offset == pytest.approx(-skew, abs=1e-3)


def test_a_message_from_a_correct_host_opens_on_hosts_five_minutes_off() -> None:
    scheduler, ahead, behind = Host(0.0), Host(300.0), Host(-300.0)
    sealed = seal_message(KEY, StopReplica("node-a", 1, 1, 0), now=clock_of(scheduler)[0].now())
    for agent in (ahead, behind):
        now = clock_of(agent)[0].now()
        assert (
            unseal(sealed, KEY, purpose=STOP_TASK, node_id="node-a", max_age=120, now=now).node_id
            == "node-a"
        )
        # Their own clocks would have refused it: stale, or from the future.
        with pytest.raises(Refused):
            unseal(sealed, KEY, purpose=STOP_TASK, node_id="node-a", max_age=120, now=agent.wall())


def test_an_old_message_is_still_refused_on_redis_time() -> None:
    host = Host(-300.0)
    clock, _ = clock_of(host)
    sealed = seal_message(KEY, StopReplica("node-a", 1, 1, 0), now=clock.now())
    host.advance(121)
    with pytest.raises(Refused) as refused:
        unseal(sealed, KEY, purpose=STOP_TASK, node_id="node-a", max_age=120, now=clock.now())
    assert refused.value.reason == "stale"


def test_the_offset_is_read_again_after_resync_and_kept_while_redis_is_down() -> None:
    host = Host(10.0)
    clock, client = clock_of(host)
    clock.now()
    host.advance(1.0)
    clock.now()
    assert client.calls == 1  # one reading per RESYNC
    host.advance(clock_module.RESYNC)
    host.skew = 70.0  # the host's clock was stepped
    assert clock.now() == pytest.approx(host.redis_now, abs=1e-3)
    assert client.calls == 2
    client.down = True
    host.advance(clock_module.RESYNC)
    assert clock.offset == pytest.approx(-70.0, abs=1e-3)  # the last offset stands
    assert clock.now() == pytest.approx(host.redis_now, abs=1e-3)
