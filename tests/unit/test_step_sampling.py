"""Per-step points above a rate (workers/step_records.py): every step of an attempt's start
(50 steps, or a second), then the multiples of a power-of-two `stride`, each shipped step's
`step_time` the mean of the steps it stands for; an epoch's last step and the step before a
flush always shipped; nothing skipped is converted; a rate of 0 ships every step. The
records carry their own clock readings, so nothing here waits or fakes a clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_step_records import assert_quiet_when_hung, followed, wait_until
from workers.node.report_shipper import MetricsFileReader
from workers.point_buffer import BEAT_INTERVAL
from workers.replica.report_writer import ReplicaReporter
from workers.step_records import StepRecord, StepSampler

BATCH = 32
START = 100.0


def steps(
    first: int, count: int, clock: float, step_time: float, epoch: int = 0
) -> list[StepRecord]:
    """`count` step records from step `first`, each `step_time` after the one before."""
    return [
        StepRecord(
            first + n,
            epoch,
            {"loss": 1.0 / (first + n)},
            "",
            clock + (n + 1) * step_time,
            step_time,
            BATCH,
        )
        for n in range(count)
    ]


def epoch_end(step: int, epoch: int, clock: float) -> StepRecord:
    return StepRecord(step, epoch, {"loss": 0.5}, "epoch_", clock, None, BATCH)


def taken(sampler: StepSampler, records: list[StepRecord]) -> list[StepRecord]:
    return [kept for record in records for kept in sampler.take(record)]


def test_every_step_of_the_first_second_then_one_in_stride_standing_for_its_steps() -> None:
    sampler = StepSampler(per_second=10)
    # The first step traces the graph (3 s), then 2 ms steps: 500 a second over the 50
    # steps of the start, 10 a second wanted is one in 50, so the stride is 64 (a power
    # of two) and the steps kept are its multiples.
    first = StepRecord(1, 0, {"loss": 1.0}, "", START, 3.0, BATCH)
    window = steps(2, 499, START, 0.002)  # up to START + 0.998
    after = steps(501, 1000, START + 0.9985, 0.002)  # from START + 1.0005
    shipped = taken(sampler, [first, *window, *after])

    assert shipped[0] == first  # the attempt's first step, as it was
    assert [r.step for r in shipped[1:50]] == list(range(2, 51))  # the whole start
    assert sampler.stride == 64
    later = shipped[50:]
    assert [r.step for r in later] == list(range(64, 1501, 64))  # 1473-1500 held
    # Each stands for the steps since the last one shipped: their mean time.
    assert all(r.step_time == pytest.approx(0.002) for r in later)
    assert later[0].logs == {"loss": 1.0 / 64}  # its own figures


def test_a_shipped_steps_time_is_the_mean_of_the_steps_it_stands_for() -> None:
    sampler = StepSampler(per_second=1)
    window = steps(1, 4, START, 0.25)  # the first second: 4 steps a second, stride 4
    assert taken(sampler, window) == window
    slow_and_fast = [
        StepRecord(5 + n, 0, None, "", START + 1.5 + n, time, BATCH)
        for n, time in enumerate([0.1, 0.2, 0.3, 0.6, 1.0, 1.0, 1.0, 1.0])
    ]
    shipped = taken(sampler, slow_and_fast)
    assert [(r.step, r.step_time) for r in shipped] == [
        (8, pytest.approx(0.3)),
        (12, pytest.approx(1.0)),
    ]


def test_an_epochs_last_step_comes_before_its_epoch_figures_standing_for_the_steps_since() -> None:
    sampler = StepSampler(per_second=10)
    records = steps(1, 550, START, 0.005)  # 200 a second over the first 50: stride 32
    records = [*records, epoch_end(550, 0, START + 2.8)]
    shipped = taken(sampler, records)
    assert sampler.stride == 32
    assert [r.step for r in shipped[-3:]] == [544, 550, 550]
    last, figures = shipped[-2], shipped[-1]
    assert last.prefix == "" and last.step_time == pytest.approx(0.005)
    assert figures.prefix == "epoch_" and figures.step_time is None


def test_a_flush_ships_the_held_step_and_nothing_twice(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    reporter = ReplicaReporter(
        path, job_id=7, attempt=1, replica=0, flush_interval=3600, sampler=StepSampler(per_second=2)
    )
    record = reporter.step_recorder()
    for r in [*steps(1, 10, START, 0.1), *steps(11, 23, START + 1.05, 0.1)]:  # 10/s: stride 8
        record(r)
    assert reporter.flush()  # what the runner does at the end and on SIGTERM
    reporter.close()

    step_times = {
        p.step: p.value for p in MetricsFileReader(path).read(final=True) if p.name == "step_time"
    }
    # Steps 1-10 (the first second), every eighth after it, and the newest one, for the step
    # since step 32: no step twice.
    assert sorted(step_times) == [*range(1, 11), 16, 24, 32, 33]
    assert step_times[33] == pytest.approx(0.1)


def test_what_is_skipped_is_never_converted(tmp_path: Path) -> None:
    class Counted:
        converted = 0

        def __float__(self) -> float:
            Counted.converted += 1
            return 1.0

    sampler = StepSampler(per_second=5)
    records = [
        StepRecord(n, 0, {"loss": Counted()}, "", START + n * 0.0099, 0.0099, BATCH)
        for n in range(1, 1001)
    ]
    reporter = ReplicaReporter(
        tmp_path / "m.jsonl", job_id=7, attempt=1, replica=0, flush_interval=3600, sampler=sampler
    )
    record = reporter.step_recorder()
    for r in records:
        record(r)
    assert reporter.flush()
    reporter.close()
    # The first 50 steps (101 a second: one in 20.2 wanted, stride 32), then the 30
    # multiples of 32 in 51-1000, and the newest (8 steps since 992) at the flush.
    assert Counted.converted == 50 + 30 + 1


def test_a_rate_of_zero_ships_every_step() -> None:
    sampler = StepSampler(per_second=0)
    records = steps(1, 5000, START, 0.0001)
    assert taken(sampler, records) == records
    assert sampler.release() == []


def test_steps_held_back_still_show_as_progress_and_a_hung_loop_goes_quiet(
    tmp_path: Path,
) -> None:
    # The agent counts every line of the metrics file as progress. Past the first 50
    # steps a stride of 1,024 holds back every step here: the sender beats for them.
    path, follower, reporter = followed(tmp_path, sampler=StepSampler(1))
    record = reporter.step_recorder()
    for r in steps(1, 1000, START, 0.000999):  # 1,001 a second: stride 1,024
        record(r)
    wait_until(
        lambda: follower.poll() >= 0 and follower.points == 3 * 50, "the first 50 steps' points"
    )
    seen = follower.last_progress
    assert seen is not None
    for step in range(1001, 1011):
        record(StepRecord(step, 0, {"loss": 1.0}, "", START + 2 + step / 1000, 0.001, BATCH))
    # A beat is a line, not a point: progress later than the last point's.
    wait_until(
        lambda: follower.poll() == 0 and (follower.last_progress or 0) > seen,
        "the held steps to show as progress",
    )
    assert follower.points == 3 * 50
    assert not any(p.step > 50 for p in MetricsFileReader(path).read(final=True))
    assert_quiet_when_hung(reporter, follower, path, BEAT_INTERVAL + 0.2)  # no beat either
    reporter.close()
