"""The scheduler's pass pacing: a burst of wake-ups shares passes, with a bounded delay."""

from __future__ import annotations

import pytest

from tests.fake_clock import Clock
from workers.control.pacing import MIN_GAP, PassPacer


def run_pass(pacer: PassPacer, clock: Clock, seconds: float) -> None:
    pacer.started()
    clock.now += seconds
    pacer.finished()


def test_first_pass_and_a_lone_wake_after_quiet_run_at_once() -> None:
    clock = Clock()
    pacer = PassPacer(interval=1.0, clock=clock)
    assert pacer.due_in() == 0
    run_pass(pacer, clock, 0.1)
    assert pacer.due_in() == pytest.approx(0.9)  # nothing wanted: the periodic pass
    clock.now += 0.5  # quiet longer than the gap
    pacer.want()
    assert pacer.due_in() == 0


def test_wake_right_after_a_pass_waits_as_long_as_the_pass_took() -> None:
    clock = Clock()
    pacer = PassPacer(interval=5.0, clock=clock)
    run_pass(pacer, clock, 0.12)
    pacer.want()
    assert pacer.due_in() == pytest.approx(0.12)
    clock.now += 0.12
    assert pacer.due_in() == 0


def test_a_cheap_pass_still_rests_the_least_gap() -> None:
    clock = Clock()
    pacer = PassPacer(interval=5.0, clock=clock)
    run_pass(pacer, clock, 0.001)
    pacer.want()
    assert pacer.due_in() == pytest.approx(MIN_GAP)


def test_a_burst_of_wakes_costs_a_pass_per_gap_not_per_wake() -> None:
    """1,000 wakes over one second (one a millisecond), passes of 100 ms: a pass runs
    only when due, and each wake is acted on within one gap plus one pass."""
    clock = Clock()
    pacer = PassPacer(interval=1.0, clock=clock)
    run_pass(pacer, clock, 0.1)
    clock.now += 1.0  # long quiet: the burst's first wake is served at once
    passes, waits, pending_since = 0, [], None
    for _ in range(1000):
        pacer.want()
        pending_since = clock.now if pending_since is None else pending_since
        if pacer.due_in() == 0:
            waits.append(clock.now - pending_since)
            pending_since = None
            run_pass(pacer, clock, 0.1)
            passes += 1
        clock.now += 0.001
    # Each pass (100 ms, the clock jumps) is followed by a rest as long, during which
    # 100 wakes arrive: 1,000 wakes take about 10 passes, and the leader is busy half
    # the time at most.
    assert 9 <= passes <= 11
    # A wake waits at most the rest after the pass before it (plus a tick).
    assert max(waits) <= 0.1 + 0.0015


def test_wake_during_a_pass_is_served_by_the_next_one() -> None:
    clock = Clock()
    pacer = PassPacer(interval=10.0, clock=clock)
    pacer.started()
    clock.now += 0.05
    pacer.want()  # arrived mid-pass: the pass may have read the queue before it
    clock.now += 0.05
    pacer.finished()
    assert pacer.due_in() == pytest.approx(0.1)
    clock.now += 0.1
    assert pacer.due_in() == 0


def test_no_wake_means_the_periodic_interval() -> None:
    clock = Clock()
    pacer = PassPacer(interval=1.0, clock=clock)
    run_pass(pacer, clock, 0.2)
    clock.now += 0.79
    assert pacer.due_in() == pytest.approx(0.01)
    clock.now += 0.01
    assert pacer.due_in() == 0
