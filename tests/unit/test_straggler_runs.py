"""Straggler detection's pure parts: spans of busy seconds per step compared with the
peers' median over consecutive steps, a replica's busy-per-step sampling, and which
failures speak against a node. Synthetic figures; the real slowdown is
tests/faults/test_stragglers.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.cluster.quarantine import node_fault
from services.cluster.straggler_runs import Report, find_stragglers
from services.statuses import ReplicaStatus
from workers.replica.busy_time import BusyPerStep, busy_seconds


def reports(*pairs: tuple[int, float]) -> list[Report]:
    return [Report(step, value) for step, value in pairs]


def even(steps: range, value: float) -> list[Report]:
    return [Report(step, value) for step in steps]


def find(gang: dict[int, list[Report]], steps: int = 50) -> list[tuple[int, int, int]]:
    return [
        (f.replica, f.first_step, f.last_step)
        for f in find_stragglers(gang, factor=2.0, steps=steps)
    ]


def test_a_replica_slow_over_enough_steps_is_named_with_its_run() -> None:
    gang = {
        0: even(range(0, 201, 20), 0.010),
        1: even(range(0, 101, 20), 0.011) + even(range(120, 201, 20), 0.030),
    }
    [finding] = find_stragglers(gang, factor=2.0, steps=50)
    assert (finding.replica, finding.first_step, finding.last_step) == (1, 101, 200)
    assert finding.busy_step_time == pytest.approx(0.030)
    assert finding.peers_step_time == pytest.approx(0.010)


def test_fewer_slow_steps_than_asked_name_no_one() -> None:
    gang = {
        0: even(range(0, 201, 20), 0.010),
        1: even(range(0, 161, 20), 0.010) + even(range(180, 201, 20), 0.030),
    }
    assert find(gang) == []  # 40 slow steps, 50 asked
    assert find(gang, steps=40) == [(1, 161, 200)]


def test_the_run_must_be_unbroken_and_current() -> None:
    slow_then_recovered = {
        0: even(range(0, 301, 20), 0.010),
        1: even(range(0, 201, 20), 0.030) + even(range(220, 301, 20), 0.010),
    }
    assert find(slow_then_recovered) == []
    broken = {
        0: even(range(0, 201, 20), 0.010),
        1: reports((0, 0.03), (20, 0.03), (40, 0.03), (60, 0.012), (80, 0.03), (100, 0.03)),
    }
    assert find(broken) == []  # 40 steps since the break


def test_at_the_factor_is_not_above_it() -> None:
    gang = {0: even(range(0, 201, 20), 0.010), 1: even(range(0, 201, 20), 0.020)}
    assert find(gang) == []
    gang[1] = even(range(0, 201, 20), 0.0201)
    assert find(gang) == [(1, 1, 200)]


def test_the_median_is_the_peers_so_one_of_two_can_straggle() -> None:
    # A gang median including the straggler (0.02 of 0.01 and 0.03) would make 0.03 only
    # 1.5x; the peers' median (the other replica) makes it 3x.
    gang = {0: even(range(0, 121, 20), 0.010), 1: even(range(0, 121, 20), 0.030)}
    assert find(gang) == [(1, 1, 120)]


def test_three_replicas_one_slow() -> None:
    gang = {
        0: even(range(0, 121, 20), 0.010),
        1: even(range(0, 121, 20), 0.040),
        2: even(range(0, 121, 20), 0.014),
    }
    [finding] = find_stragglers(gang, factor=2.0, steps=50)
    assert finding.replica == 1
    assert finding.peers_step_time == pytest.approx(0.012)


def test_reports_at_other_steps_are_matched_by_the_steps_they_share() -> None:
    # Replica 1 reports at other steps than 0 (each samples on its own clock): each of its
    # spans is compared with 0's span sharing most steps with it; its newest, (170, 200],
    # shares none with 0's yet and waits for 0's next report.
    gang = {
        0: even(range(0, 151, 25), 0.010),
        1: reports(
            (3, 0.03), (33, 0.03), (71, 0.03), (104, 0.03), (140, 0.03), (170, 0.03), (200, 0.03)
        ),
    }
    assert find(gang) == [(1, 4, 170)]


def test_one_replica_alone_or_no_span_names_no_one() -> None:
    assert find({0: even(range(0, 201, 20), 0.01)}) == []
    assert find({0: reports((100, 0.01)), 1: reports((100, 0.05))}) == []


def test_busy_per_step_is_the_growth_per_step_between_samples() -> None:
    busy = BusyPerStep()
    assert busy.sample(0, 1.0) is None  # before training
    assert busy.sample(10, 2.0) is None  # the first sample only starts
    assert busy.sample(30, 3.0) == pytest.approx(0.05)
    assert busy.sample(30, 3.5) is None  # no step trained
    assert busy.sample(40, 3.0) is None  # the count went back (a busy thread ended)
    assert busy.sample(50, 4.0) == pytest.approx(0.1)
    assert busy.sample(60, None) is None


def test_busy_seconds_sums_every_threads_run_and_wait(tmp_path: Path) -> None:
    for tid, line in (("1", "1000000000 500000000 7"), ("2", "250000000 250000000 3")):
        (tmp_path / tid).mkdir()
        (tmp_path / tid / "schedstat").write_text(line + "\n")
    (tmp_path / "3").mkdir()  # a thread that ended while read
    assert busy_seconds(tmp_path) == pytest.approx(2.0)
    assert busy_seconds(tmp_path / "missing") is None
    own = busy_seconds()
    assert own is None or own > 0


@pytest.mark.parametrize(
    ("status", "code", "failure", "fault"),
    [
        (ReplicaStatus.LOST, None, "lost: node n1 stopped answering", "lost"),
        (ReplicaStatus.FAILED, None, "lost: its agent no longer runs it", "lost"),
        (ReplicaStatus.FAILED, None, "no progress for 120 s", None),  # hung
        (ReplicaStatus.FAILED, 137, "", "killed by signal 9"),
        (ReplicaStatus.FAILED, 143, "", "killed by signal 15"),
        (ReplicaStatus.FAILED, 28, "", "no space left on DATA_DIR"),
        (ReplicaStatus.FAILED, 138, "", None),  # the trainer's own retry
        (ReplicaStatus.FAILED, 75, "", None),  # checkpointed on request
        (ReplicaStatus.FAILED, 1, "", None),  # the program's error
        (ReplicaStatus.FAILED, 139, "", None),  # permanent: a segfault fails anywhere
        (ReplicaStatus.FAILED, 2, "", None),
    ],
)
def test_which_failures_speak_against_the_node(
    status: ReplicaStatus, code: int | None, failure: str, fault: str | None
) -> None:
    assert node_fault(status, code, failure) == fault
