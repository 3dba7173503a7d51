"""The scheduler's read of the progress hash (real Redis): each replica is alive through
when its beat was seen to arrive, on the control plane's clock (faked here), plus the
seconds the beat vouched ahead; never through the time its sender wrote."""

from __future__ import annotations

import redis

from services.cluster.arrivals import Arrivals
from services.wire.batches import ProgressBeat
from services.wire.keys import PROGRESS_HASH
from workers.control.beats import PROGRESS_FORGET, read_progress


def test_progress_is_timed_by_arrival_plus_what_the_beat_vouched_ahead(bus: redis.Redis) -> None:
    now = [1000.0]
    arrivals: Arrivals[str] = Arrivals(lambda: now[0])
    # Written by hosts 5 minutes behind and 5 minutes ahead of the control plane; the
    # second one saving its model, alive 300 s past its beat.
    bus.hset(PROGRESS_HASH, *ProgressBeat(1, 1, 0, 700.0).encode())
    bus.hset(PROGRESS_HASH, *ProgressBeat(1, 1, 1, 1600.0, ahead=300.0).encode())
    assert read_progress(bus, arrivals) == {(1, 1, 0): 1000.0, (1, 1, 1): 1300.0}
    now[0] = 1005.0
    bus.hset(PROGRESS_HASH, *ProgressBeat(1, 1, 0, 705.0).encode())
    assert read_progress(bus, arrivals) == {(1, 1, 0): 1005.0, (1, 1, 1): 1300.0}


def test_a_beat_unchanged_for_an_hour_of_the_control_planes_clock_is_forgotten(
    bus: redis.Redis,
) -> None:
    now = [1000.0]
    arrivals: Arrivals[str] = Arrivals(lambda: now[0])
    # Dated far in the future by its host: its own time would keep it for ever.
    bus.hset(PROGRESS_HASH, *ProgressBeat(2, 1, 0, 9e9).encode())
    read_progress(bus, arrivals)
    now[0] += PROGRESS_FORGET + 1
    read_progress(bus, arrivals)
    assert bus.hlen(PROGRESS_HASH) == 0
