"""The runner's report channel: what the replica's `ReplicaReporter` appends to its
metrics file is what the agent's reader ships (epochs, final metrics, beats), a beat
cannot claim more than MAX_BEAT_AHEAD, and who replicas run as."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cohort.metrics import decode_line, encode_beat
from services.settings import Settings
from workers.node import isolation
from workers.node.replica_files import ReplicaFollower
from workers.node.report_shipper import MAX_BEAT_AHEAD, MetricsFileReader
from workers.replica.report_writer import ReplicaReporter, encode_chunk


def test_what_the_runner_writes_is_what_the_agent_ships(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    reporter = ReplicaReporter(path, job_id=7, attempt=1, replica=0, flush_interval=3600)
    for step in (1, 2):
        reporter.add(step, 0, "loss", 1.0 / step, ts=100.0 + step)
        reporter.add(step, 0, "accuracy", step / 4, ts=100.0 + step)
    reporter.add(2, None, "cpu_percent", 50.0, ts=103.0)
    assert not path.exists()  # buffered: written at the next flush
    assert reporter.report_final({"eval_accuracy": 0.9, "bad": float("nan")}) is True
    reporter.close()
    points = MetricsFileReader(path).read(final=True)
    assert [(p.step, p.epoch, p.name, p.value, p.ts) for p in points][:5] == [
        (1, 0, "loss", 1.0, 101.0),
        (1, 0, "accuracy", 0.25, 101.0),
        (2, 0, "loss", 0.5, 102.0),
        (2, 0, "accuracy", 0.5, 102.0),
        (2, None, "cpu_percent", 50.0, 103.0),
    ]
    final = points[5]
    assert (final.step, final.epoch, final.name, final.value) == (2, None, "eval_accuracy", 0.9)
    assert len(points) == 6  # the NaN is skipped, as the Redis reporter skips it


def test_a_name_twice_at_one_step_gets_a_line_of_its_own() -> None:
    lines = encode_chunk(
        [(3, 1, "loss", 1.0, 5.0), (3, 1, "loss", 0.5, 5.0), (3, 1, "acc", 0.1, 5.0)]
    ).splitlines()
    assert [decode_line(raw).points for raw in lines] == [
        [(3, "loss", 1.0, 5.0, 1)],
        [(3, "loss", 0.5, 5.0, 1), (3, "acc", 0.1, 5.0, 1)],
    ]


def test_a_beat_is_progress_dated_as_it_says_but_never_past_the_bound(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b"")
    follower = ReplicaFollower(on_point=lambda _point: None, metrics_file=path)
    reporter = ReplicaReporter(path, job_id=7, attempt=1, replica=0)
    reporter.beat(extend=300.0)  # the runner saving its model
    follower.poll()
    assert follower.last_progress is not None
    assert follower.last_progress == pytest.approx(time.time() + 300.0, abs=5)
    with open(path, "ab") as handle:  # user code lying about how long it will be quiet
        handle.write(encode_beat(time.time() + 10**9))
    follower.poll()
    assert follower.last_progress <= time.time() + MAX_BEAT_AHEAD


@pytest.mark.parametrize(
    "raw",
    [
        b'{"beat": "soon"}',
        b'{"beat": 1e999}',
        b'{"beat": 5, "step": 1}',
        b'{"step": 1, "epoch": -1, "metrics": {"a": 1}}',
    ],
)
def test_a_malformed_beat_or_epoch_is_refused(raw: bytes) -> None:
    with pytest.raises(ValueError):
        decode_line(raw)


def test_each_job_gets_its_own_uid_never_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COHORT_REPLICA_UID_BASE", "200000")
    monkeypatch.setenv("COHORT_REPLICA_UID_RANGE", "1000")
    monkeypatch.setenv("COHORT_REPLICA_PRIVATE_TMP", "false")  # not what this test is about
    settings = Settings()
    monkeypatch.setattr(isolation.os, "geteuid", lambda: 0)
    assert isolation.replica_user(settings, 7) == isolation.ReplicaUser(200007, 200007)
    assert isolation.replica_user(settings, 1007) == isolation.ReplicaUser(200007, 200007)
    assert isolation.replica_user(settings, 8) == isolation.ReplicaUser(200008, 200008)
    assert isolation.popen_options(isolation.replica_user(settings, 8)) == {
        "user": 200008,
        "group": 200008,
        "extra_groups": [],
        "umask": 0o077,
    }
    # An agent that is not root runs replicas as itself (it cannot change user).
    monkeypatch.setattr(isolation.os, "geteuid", lambda: 1000)
    assert isolation.replica_user(settings, 7) is None
    assert isolation.popen_options(None) == {"umask": 0o077}


@pytest.mark.parametrize(("base", "span"), [("0", "10"), ("999", "10"), ("2147483000", "1000")])
def test_a_uid_span_that_could_reach_root_or_overflow_is_refused(
    monkeypatch: pytest.MonkeyPatch, base: str, span: str
) -> None:
    monkeypatch.setenv("COHORT_REPLICA_UID_BASE", base)
    monkeypatch.setenv("COHORT_REPLICA_UID_RANGE", span)
    with pytest.raises(ValueError, match="REPLICA_UID"):
        Settings()


def test_a_write_the_full_disk_cut_off_is_told_and_loses_no_point_once_space_is_freed(
    tmp_path: Path,
) -> None:
    from tests.tmpfs import fill, small_tmpfs

    with small_tmpfs(tmp_path / "disk", 64 * 1024) as disk:
        path = disk / "metrics.jsonl"
        full: list[bool] = []  # the runner stops the replica from this call
        reporter = ReplicaReporter(
            path,
            job_id=7,
            attempt=1,
            replica=0,
            flush_interval=3600,
            on_no_space=lambda: full.append(True),
        )
        reporter.add(1, 0, "loss", 1.0, ts=101.0)
        assert reporter.flush() is True
        # Blank lines (the reader skips them) up to 20 bytes before the end of the file's
        # page, then a full disk: the next chunk's first line is cut off after 20 bytes.
        with open(path, "ab") as padding:
            padding.write(b"\n" * (4096 - 20 - path.stat().st_size))
        filler = fill(disk)
        for step in range(2, 200):
            reporter.add(step, 0, "loss", 1.0 / step, ts=100.0 + step)
        assert reporter.flush() is False  # kept for the next flush
        assert full == [True]
        assert path.stat().st_size == 4096 and not path.read_bytes().endswith(b"\n")
        filler.unlink()
        assert reporter.flush() is True
        reporter.close()
        points = MetricsFileReader(path).read(final=True)
        assert [p.step for p in points] == list(range(1, 200))
