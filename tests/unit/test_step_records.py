"""Steps recorded by the training thread, shipped by the sender thread: every step's
points reach the metrics file exactly once and in order, converted off the training
thread; beats are rate-limited, and progress (lines in the file) flows while steps are
recorded and stops when they stop; the runner's flushes (end of training, SIGTERM)
ship what the sender has not yet."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cohort.metrics import decode_line
from services.wire.batches import Point
from workers.node.replica_files import ReplicaFollower
from workers.node.report_shipper import MetricsFileReader
from workers.point_buffer import BEAT_INTERVAL, PointBuffer
from workers.replica.report_writer import ReplicaReporter
from workers.step_records import StepRecord

DEADLINE = 10.0


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.005)


class ThreadNoting:
    """A log value like a tensor: a float only when asked, noting which thread asked."""

    def __init__(self, value: float, threads: set[int]) -> None:
        self.value, self.threads = value, threads

    def __float__(self) -> float:
        self.threads.add(threading.get_ident())
        return self.value


def points_in(path: Path) -> list[tuple[int, int | None, str, float]]:
    if not path.exists():
        return []
    return [(p.step, p.epoch, p.name, p.value) for p in MetricsFileReader(path).read(final=True)]


def test_recorded_steps_are_shipped_by_the_sender_once_each_in_order(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    reporter = ReplicaReporter(path, job_id=7, attempt=1, replica=0, flush_interval=0.01)
    record = reporter.step_recorder()
    converted_on: set[int] = set()
    steps = 300
    for step in range(1, steps + 1):
        record(
            StepRecord(
                step,
                0,
                {"loss": ThreadNoting(1.0 / step, converted_on)},
                "",
                time.perf_counter(),
                0.01,
                64,
            )
        )
    wait_until(lambda: len(points_in(path)) == 3 * steps, "the sender to ship every step")
    assert threading.get_ident() not in converted_on  # never on the training thread
    assert converted_on, "the sender thread converted the values"
    reporter.close()
    assert points_in(path) == [
        point
        for step in range(1, steps + 1)
        for point in (
            (step, 0, "loss", 1.0 / step),
            (step, 0, "step_time", 0.01),
            (step, 0, "examples_per_sec", 6400.0),
        )
    ]


def test_record_timestamps_are_wall_clock_times_of_the_steps(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    reporter = ReplicaReporter(path, job_id=7, attempt=1, replica=0, flush_interval=3600)
    record = reporter.step_recorder()
    before = time.time()
    record(StepRecord(1, 0, {"loss": 0.5}, "", time.perf_counter(), None, 64))
    after = time.time()
    assert reporter.flush()
    reporter.close()
    (point,) = MetricsFileReader(path).read(final=True)
    assert before - 0.01 <= point.ts <= after + 0.01


def test_points_added_after_recorded_steps_follow_them(tmp_path: Path) -> None:
    # The resource sampler (another thread) adds a point at the last step: it must land
    # after the step's own points, and the final metrics at the last recorded step.
    path = tmp_path / "metrics.jsonl"
    reporter = ReplicaReporter(path, job_id=7, attempt=1, replica=0, flush_interval=3600)
    record = reporter.step_recorder()
    record(StepRecord(1, 0, {"loss": 0.5}, "", time.perf_counter(), None, 64))
    record(StepRecord(2, 0, {"loss": 0.25}, "", time.perf_counter(), None, 64))
    assert reporter.pending == 2
    reporter.add(reporter.last_step, None, "cpu_percent", 50.0)  # drains the records first
    assert reporter.last_step == 2
    record(StepRecord(2, 0, {"loss": 0.125}, "epoch_", time.perf_counter(), None, 64))
    assert reporter.report_final({"eval_accuracy": 0.9}) is True
    reporter.close()
    assert points_in(path) == [
        (1, 0, "loss", 0.5),
        (2, 0, "loss", 0.25),
        (2, None, "cpu_percent", 50.0),
        (2, 0, "epoch_loss", 0.125),
        (2, None, "eval_accuracy", 0.9),
    ]


def test_a_flush_from_another_thread_ships_what_the_sender_has_not(tmp_path: Path) -> None:
    # The runner's SIGTERM watchdog flushes with a lock timeout from its own thread.
    path = tmp_path / "metrics.jsonl"
    reporter = ReplicaReporter(path, job_id=7, attempt=1, replica=0, flush_interval=3600)
    record = reporter.step_recorder()
    for step in range(1, 6):
        record(StepRecord(step, 0, {"loss": float(step)}, "", time.perf_counter(), None, 64))
    results: list[bool] = []
    watchdog = threading.Thread(target=lambda: results.append(reporter.flush(lock_timeout=1.0)))
    watchdog.start()
    watchdog.join()
    assert results == [True]
    assert [step for step, *_ in points_in(path)] == [1, 2, 3, 4, 5]
    record(StepRecord(6, 0, {"loss": 6.0}, "", time.perf_counter(), None, 64))
    reporter.close()  # what was left is written before the file is closed
    assert [step for step, *_ in points_in(path)] == [1, 2, 3, 4, 5, 6]


class Flaky(PointBuffer):
    """Fails its first `failures` sends."""

    def __init__(self, failures: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.failures = failures
        self.sent: list[Point] = []

    def _send(self, points: list[Point]) -> Exception | None:
        if self.failures:
            self.failures -= 1
            return OSError("disk full")
        self.sent.extend(points)
        return None

    def _send_beat(self, alive_until: float) -> None:
        pass


def test_the_sender_keeps_points_through_failed_sends(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("workers.point_buffer.MAX_PAUSE", 0.02)
    buffer = Flaky(3, job_id=7, attempt=1, replica=0, flush_interval=0.005)
    record = buffer.step_recorder()
    for step in range(1, 101):
        record(StepRecord(step, 0, {"loss": float(step)}, "", time.perf_counter(), None, 64))
    wait_until(lambda: len(buffer.sent) == 100, "the points to be sent after the failures")
    buffer.stop_sender()
    assert [point[0] for point in buffer.sent] == list(range(1, 101))
    assert "could not write metrics" in capsys.readouterr().err


def test_progress_lines_flow_while_steps_are_recorded_and_stop_when_they_stop(
    tmp_path: Path,
) -> None:
    # The agent's follower counts every line as progress; the sender writes only what
    # the training thread recorded, so a hung training loop goes quiet.
    path, follower, reporter = followed(tmp_path)
    record = reporter.step_recorder()
    seen: list[float] = []
    for step in range(1, 4):
        record(StepRecord(step, 0, {"loss": 1.0}, "", time.perf_counter(), None, 64))
        wait_until(lambda: follower.poll() > 0, f"step {step} to show as progress")
        assert follower.last_progress is not None
        seen.append(follower.last_progress)
    assert seen == sorted(seen)
    assert_quiet_when_hung(reporter, follower, path, 0.1)
    assert follower.last_progress == seen[-1]
    reporter.close()


def followed(
    tmp_path: Path, **reporter_options: Any
) -> tuple[Path, ReplicaFollower, ReplicaReporter]:
    """A replica's metrics file, the agent's follower of it and the replica's reporter
    writing it every 10 ms."""
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b"")
    follower = ReplicaFollower(on_point=lambda _point: None, metrics_file=path)
    reporter = ReplicaReporter(
        path, job_id=7, attempt=1, replica=0, flush_interval=0.01, **reporter_options
    )
    return path, follower, reporter


def assert_quiet_when_hung(
    reporter: PointBuffer, follower: ReplicaFollower, path: Path, seconds: float
) -> None:
    """Hung: nothing recorded for `seconds` (many flush intervals), and nothing written."""
    size = path.stat().st_size
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        reporter.wake_sender()
        time.sleep(0.01)
    assert path.stat().st_size == size
    assert follower.poll() == 0


def test_beats_are_rate_limited(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr("workers.point_buffer.time.monotonic", lambda: now[0])
    path = tmp_path / "metrics.jsonl"
    reporter = ReplicaReporter(path, job_id=7, attempt=1, replica=0, flush_interval=3600)
    for _ in range(1000):
        reporter.beat()
    now[0] += BEAT_INTERVAL / 2
    reporter.beat()
    beats = [decode_line(raw).beat for raw in path.read_bytes().splitlines()]
    assert len(beats) == 1
    now[0] += BEAT_INTERVAL / 2
    reporter.beat()
    reporter.beat(extend=300.0)  # always written: the phase with no steps is starting
    beats = [decode_line(raw).beat for raw in path.read_bytes().splitlines()]
    assert len(beats) == 3
    assert beats[2] is not None and beats[2] > time.time() + 250
    reporter.close()
