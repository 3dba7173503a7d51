"""The merge that puts a job's points, lines and status changes in one order, by the marks
recorded when each was stored (services/telemetry/stream_order.py): pure, no I/O."""

from __future__ import annotations

import datetime as dt

import pytest

from services.telemetry.cursor import Cursor
from services.telemetry.stream_order import Segment, StatusChange, in_order
from services.wire.feed import LogRow, MetricRow

AT = dt.datetime(2026, 11, 27, tzinfo=dt.UTC)
ALL = ("status", "metric", "log")


def point(i: int) -> MetricRow:
    return MetricRow(i, 1, 0, i, 0, "loss", 0.5, 1000.0 + i)


def line(i: int, metric_mark: int) -> tuple[LogRow, int]:
    return LogRow(i, 1, 0, 2000.0 + i, f"line {i}"), metric_mark


def change(i: int, to: str, metric_mark: int, log_mark: int) -> StatusChange:
    return StatusChange(i, 1, None, to, "", AT, metric_mark, log_mark)


def segment(
    metrics: list[int], logs: list[tuple[LogRow, int]], events: list[StatusChange], **complete: bool
) -> Segment:
    return Segment(
        [point(i) for i in metrics],
        logs,
        events,
        {"metric": True, "log": True, "status": True, **complete},
    )


def names(items: list[tuple[str, object, str]]) -> list[str]:
    return [f"{kind[0]}{item.id}" for kind, item, _ in items]  # type: ignore[attr-defined]


# Stored in this order: e1 queued, m1 m2, l1 (after m2), e2 running (after m2, l1),
# m3, l2 l3 (after m3), m4.
STORED = segment(
    [1, 2, 3, 4],
    [line(1, 2), line(2, 3), line(3, 3)],
    [change(1, "queued", 0, 0), change(2, "running", 2, 1)],
)


def test_items_come_in_the_order_their_marks_record() -> None:
    cursor = Cursor()
    items = in_order(STORED, cursor, ALL)
    assert names(items) == ["s1", "m1", "m2", "l1", "s2", "m3", "l2", "l3", "m4"]
    assert [event_id for _, _, event_id in items][-1] == str(cursor) == "4.3.2"


@pytest.mark.parametrize("at", range(10))
def test_a_resume_from_any_event_id_gives_the_rest_in_the_same_order(at: int) -> None:
    whole = in_order(STORED, Cursor(), ALL)
    start = Cursor() if at == 0 else Cursor.parse(whole[at - 1][2], "last-event-id")
    assert in_order(STORED, start, ALL) == whole[at:]


@pytest.mark.parametrize(
    "kinds",
    [
        ("metric",),
        ("log",),
        ("status",),
        ("metric", "log"),
        ("status", "log"),
        ("status", "metric"),
    ],
)
def test_a_follower_of_some_kinds_gets_the_same_order_without_the_others(
    kinds: tuple[str, ...],
) -> None:
    whole = names(in_order(STORED, Cursor(), ALL))
    wanted = [n for n in whole if {"s": "status", "m": "metric", "l": "log"}[n[0]] in kinds]
    assert names(in_order(STORED, Cursor(), kinds)) == wanted


def test_a_status_change_waits_for_the_rows_stored_before_it() -> None:
    """Rows committed between the segment's reads: the change's marks name rows the
    segment does not hold, so the merge stops before it (the next read has them)."""
    partial = segment([1], [], [change(1, "running", 2, 0)])
    assert names(in_order(partial, Cursor(), ALL)) == ["m1"]


def test_the_merge_stops_where_a_page_ended() -> None:
    paged = segment([1, 2], [line(1, 5)], [], metric=False)
    cursor = Cursor()
    assert names(in_order(paged, cursor, ALL)) == ["m1", "m2"]
    assert str(cursor) == "2.0.0"  # the line waits for points 3 to 5
