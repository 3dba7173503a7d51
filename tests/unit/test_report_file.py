"""The agent's reader of the file cohort.report() appends to: partial lines, bad lines."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.wire.batches import Point
from workers.node import report_shipper
from workers.node.report_shipper import MetricsFileReader


def line(step: object, **metrics: object) -> bytes:
    return json.dumps({"step": step, "metrics": metrics, "ts": 5.0}).encode() + b"\n"


def steps(points: list[Point]) -> list[tuple[int, str, float]]:
    return [(p.step, p.name, p.value) for p in points]


def test_what_report_writes_is_what_the_agent_reads(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    subprocess.run(
        [
            sys.executable,
            "-c",
            "from cohort import report\nfor s in range(3): report(s, loss=1 / (s + 1), acc=s / 4)",
        ],
        env={**os.environ, "COHORT_METRICS_FILE": str(path)},
        check=True,
    )
    points = MetricsFileReader(path).read()
    assert steps(points) == [
        (s, name, value)
        for s in range(3)
        for name, value in (("loss", 1 / (s + 1)), ("acc", s / 4))
    ]
    assert all(p.ts > 1e9 for p in points)


def test_a_partial_last_line_is_kept_for_the_next_read(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    whole = line(1, loss=1.0) + line(2, loss=0.5)
    path.write_bytes(whole[:-10])
    reader = MetricsFileReader(path)
    assert steps(reader.read()) == [(1, "loss", 1.0)]
    assert reader.read() == []
    with open(path, "ab") as handle:
        handle.write(whole[-10:])
    assert steps(reader.read()) == [(2, "loss", 0.5)]


def test_an_unterminated_last_line_is_read_when_the_replica_has_exited(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(line(1, loss=1.0).rstrip(b"\n"))
    reader = MetricsFileReader(path)
    assert reader.read() == []
    assert steps(reader.read(final=True)) == [(1, "loss", 1.0)]


@pytest.mark.parametrize(
    "bad",
    [
        b"{not json",
        b"[1, 2]",
        b'"text"',
        b"\xff\xfe",
        b'{"metrics": {"a": 1}}',
        line(True, a=1),
        line(1.5, a=1),
        line(-1, a=1),
        line(2**31, a=1),
        line(1),
        line(1, a="1"),
        line(1, a=None),
        line(1, a=True),
        b'{"step": 1, "metrics": {"a": NaN}}',
        b'{"step": 1, "metrics": {"a": 1e999}}',
        line(1, **{"x" * 65: 1}),
        b'{"step": 1, "metrics": {"a": 1}, "ts": "now"}',
    ],
)
def test_bad_lines_are_skipped_with_a_warning_and_never_stall(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, bad: bytes
) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(line(1, a=1) + bad.rstrip(b"\n") + b"\n" + line(2, a=2))
    reader = MetricsFileReader(path)
    with caplog.at_level(logging.WARNING):
        assert steps(reader.read()) == [(1, "a", 1.0), (2, "a", 2.0)]
    assert reader.bad_lines == 1 and "skipping a bad line" in caplog.text


def test_a_line_longer_than_a_read_is_dropped_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(report_shipper, "READ_BYTES", 64)
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b"x" * 200 + b"\n" + line(3, a=3))
    reader = MetricsFileReader(path)
    points = []
    for _ in range(6):
        points += reader.read()
    assert steps(points) == [(3, "a", 3.0)] and reader.bad_lines == 1


def test_a_link_in_place_of_the_file_is_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "other-job.jsonl"
    elsewhere.write_bytes(line(1, secret=42))
    (tmp_path / "metrics.jsonl").symlink_to(elsewhere)
    assert MetricsFileReader(tmp_path / "metrics.jsonl").read() == []
