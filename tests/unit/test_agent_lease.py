"""The agent's lease (workers/node/lease.py): when it lapses, how long fenced replicas get,
and the settings that keep it between a heartbeat and the node timeout."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.settings import Settings
from tests.fake_clock import Clock
from workers.node.lease import Lease, fence_grace


def test_the_lease_runs_from_the_sending_of_the_last_beat_redis_took() -> None:
    clock = Clock(100.0)
    lease = Lease(4.0, clock)
    assert lease.left() == 4.0  # held from the start
    sent = lease.now()
    clock.now += 3.0  # the beat took 3 s to be taken
    lease.renew(sent)
    assert lease.left() == 1.0  # counted from the sending, not the answer
    clock.now += 1.0
    assert lease.left() <= 0


def test_a_late_answer_to_an_older_beat_does_not_move_the_lease_back() -> None:
    clock = Clock(100.0)
    lease = Lease(4.0, clock)
    old = lease.now()
    clock.now += 2.0
    lease.renew(lease.now())
    lease.renew(old)  # the answer to a beat sent before the last one, come late
    assert lease.left() == 4.0


@pytest.mark.parametrize(
    "node_timeout, lease, stop_grace",
    [(6, 4, 5), (15, 10, 8), (15, 10, 1), (60, 10, 8), (10, 9.5, 8)],
)
def test_fenced_replicas_are_gone_before_the_node_can_be_declared_lost(
    node_timeout: float, lease: float, stop_grace: float
) -> None:
    settings = Settings(
        NODE_TIMEOUT=node_timeout, AGENT_LEASE=lease, STOP_GRACE=stop_grace, HEARTBEAT_INTERVAL=0.5
    )
    grace = fence_grace(settings)
    assert 0 <= grace <= stop_grace
    # SIGKILL at lease + grace: still half of the rest of the node timeout to spare.
    assert lease + grace <= node_timeout - (node_timeout - lease) / 2
    if stop_grace <= (node_timeout - lease) / 2:
        assert grace == stop_grace  # the usual grace when it fits


def test_the_faults_tests_timings_give_a_one_second_fence() -> None:
    from tests.faults.conftest import FAST

    settings = Settings(**{k.removeprefix("COHORT_"): v for k, v in FAST.items()})
    assert fence_grace(settings) == 1.0


@pytest.mark.parametrize(
    "values",
    [
        {"AGENT_LEASE": 15.0, "NODE_TIMEOUT": 15.0},  # as long as the node timeout
        {"AGENT_LEASE": 20.0, "NODE_TIMEOUT": 15.0},
        {"AGENT_LEASE": 2.0, "HEARTBEAT_INTERVAL": 2.0},  # would lapse between healthy beats
    ],
)
def test_a_lease_outside_beat_and_node_timeout_is_refused(values: dict[str, float]) -> None:
    with pytest.raises(ValidationError, match="COHORT_AGENT_LEASE"):
        Settings(**values)
