import json

import pytest

from services.telemetry.metrics import parse_batch


def test_parse_batch_rows() -> None:
    raw = json.dumps(
        {
            "job_id": 3,
            "attempt": 1,
            "replica": 1,
            "points": [[1, 0, "loss", 2.5, 100.0], [1, 0, "accuracy", 0.1, 100.0]],
        }
    )
    rows = parse_batch(raw)
    assert rows == [
        {
            "job_id": 3,
            "attempt": 1,
            "replica": 1,
            "step": 1,
            "epoch": 0,
            "name": "loss",
            "value": 2.5,
            "ts": 100.0,
        },
        {
            "job_id": 3,
            "attempt": 1,
            "replica": 1,
            "step": 1,
            "epoch": 0,
            "name": "accuracy",
            "value": 0.1,
            "ts": 100.0,
        },
    ]


def test_parse_batch_drops_bad_points() -> None:
    raw = json.dumps(
        {
            "job_id": 3,
            "attempt": 1,
            "replica": 0,
            "points": [
                [1, None, "loss", "nan", 1.0],
                [2, None, "", 1.0, 1.0],
                [3, None, "x" * 65, 1.0, 1.0],
                [4],
                [5, None, "ok", 1, 1.0],
            ],
        }
    )
    assert [r["step"] for r in parse_batch(raw)] == [5]


def test_parse_batch_drops_points_outside_the_columns() -> None:
    # One such point would fail the whole batch's COPY: refused here, the rest kept.
    raw = json.dumps(
        {
            "job_id": 3,
            "attempt": 1,
            "replica": 0,
            "points": [
                [2**31, None, "loss", 1.0, 1.0],
                [-1, None, "loss", 1.0, 1.0],
                [1, 2**40, "loss", 1.0, 1.0],
                [1, None, "a\x00b", 1.0, 1.0],
                [1, None, "loss", 1.0, "soon"],
                [2**31 - 1, None, "loss", 1.0, 1.0],
            ],
        }
    )
    assert [r["step"] for r in parse_batch(raw)] == [2**31 - 1]


@pytest.mark.parametrize("head", [{"job_id": 2**40}, {"attempt": -1}, {"replica": "x"}])
def test_parse_batch_refuses_a_bad_head(head: dict[str, object]) -> None:
    raw = json.dumps(
        {"job_id": 3, "attempt": 1, "replica": 0, **head, "points": [[1, None, "loss", 1.0, 1.0]]}
    )
    with pytest.raises(ValueError):
        parse_batch(raw)
