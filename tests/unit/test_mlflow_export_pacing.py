"""The leader's MLflow export rests after each round (workers/control/tracking.py): the rest
of its interval, and never less than three times the CPU the round took, so a backlog
costs the scheduler at most a quarter of a core."""

from __future__ import annotations

import pytest

from workers.control.tracking import CPU_SHARE, rest_after


@pytest.mark.parametrize(
    ("seconds", "cpu", "interval", "rest"),
    [
        (0.1, 0.01, 2.0, 1.9),  # a quiet round: the rest of the interval
        (3.0, 0.5, 2.0, 1.5),  # a backlog: three times its CPU
        (0.9, 0.8, 2.0, 2.4),
        (5.0, 0.0, 2.0, 0.0),  # a round waiting on MLflow only: straight on
    ],
)
def test_a_round_rests_the_interval_and_at_least_three_times_its_cpu(
    seconds: float, cpu: float, interval: float, rest: float
) -> None:
    assert rest_after(seconds, cpu, interval) == pytest.approx(rest)
    if cpu:
        assert cpu / (cpu + rest_after(seconds, cpu, interval)) <= CPU_SHARE + 1e-9
