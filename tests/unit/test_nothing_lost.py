"""The fault tests' nothing-lost check (tests/faults/nothing_lost.py) reads a replica's
files as its agent does, and sees a point counted twice in a rollup."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from tests.faults.nothing_lost import rollup_problems, written_lines, written_points


def test_points_as_the_agent_reads_them(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(
        b'{"step": 1, "metrics": {"loss": 0.5, "acc": 0.1}, "ts": 10.0}\n'
        b'{"beat": 11.0}\n'
        b'{"step": 2, "metrics": {"loss": 0.4}, "ts": 12.0, "epoch": 0}\n'
        b'{"step": 2, "metri\n'  # torn by a full disk: skipped
        b'{"step": 2, "metrics": {"loss": 9.9}, "ts": 13.0}\n'  # stored: the first
        b'{"step": 3, "metrics": {"loss": 0.3}, "ts": 14.0}'
    )  # unterminated
    assert written_points(path) == {
        (1, "loss"): (0.5, 10.0, None),
        (1, "acc"): (0.1, 10.0, None),
        (2, "loss"): (0.4, 12.0, 0),
        (3, "loss"): (0.3, 14.0, None),
    }
    assert written_points(tmp_path / "absent") == {}


def test_lines_as_the_shipper_numbers_them(tmp_path: Path) -> None:
    path = tmp_path / "replica-0.log"
    path.write_bytes(b"one\r\n\ntwo \xff\nlast without newline")
    assert written_lines(path) == ["one", "", "two \ufffd", "last without newline"]
    path.write_bytes(b"a\nb\n")
    assert written_lines(path) == ["a", "b"]


def test_a_point_counted_twice_in_its_rollup_is_found() -> None:
    stored = {(1, 0): {(1, "loss"): (0.5, 10.0, None), (150, "loss"): (0.25, 11.0, None)}}

    def rollup(bucket: int, points: int, total: float) -> SimpleNamespace:
        return SimpleNamespace(
            attempt=1, replica=0, name="loss", bucket=bucket, points=points, total=total
        )

    assert rollup_problems(stored, [rollup(0, 1, 0.5), rollup(1, 1, 0.25)]) == []
    problems = rollup_problems(stored, [rollup(0, 2, 1.0)])
    assert len(problems) == 2 and "2 points" in problems[0] and "no rollup" in problems[1]
