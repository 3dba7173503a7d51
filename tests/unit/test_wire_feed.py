"""The live feed's contract (services/wire/feed.py): every entry the ingest can write reads
back as itself, from its own encoding and from the strings Redis hands back; anything else
is refused as a FeedError, never half-read."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.wire.feed import FeedEntry, FeedError, LogRow, MetricRow, Place

ids = st.integers(min_value=1, max_value=2**63 - 1)
small = st.integers(min_value=0, max_value=2**31 - 1)
finite = st.floats(allow_nan=False, allow_infinity=False)

metric_rows = st.builds(
    MetricRow,
    ids,
    small,
    small,
    small,
    st.none() | small,
    st.text(min_size=1, max_size=64),
    finite,
    finite,
)
log_rows = st.builds(LogRow, ids, small, small, finite, st.text(max_size=4000))
places = st.builds(Place, ids | st.just(0), ids | st.just(-1), ids | st.just(-1))
entries = st.builds(
    FeedEntry, st.just("metric"), st.lists(metric_rows, max_size=30).map(tuple), places
) | st.builds(FeedEntry, st.just("log"), st.lists(log_rows, max_size=30).map(tuple), places)


def as_redis_returns(fields: dict[str, Any]) -> dict[str, str]:
    """The fields as XREAD gives them to the api (decode_responses=True): all strings."""
    return {k: v.decode() if isinstance(v, bytes) else str(v) for k, v in fields.items()}


@given(entries)
def test_an_entry_reads_back_as_itself(entry: FeedEntry) -> None:
    assert FeedEntry.decode(entry.encode()) == entry
    again = FeedEntry.decode(as_redis_returns(entry.encode()))
    assert again == entry
    assert all(
        type(row) is type(original) for row, original in zip(again.rows, entry.rows, strict=True)
    )


@given(metric_rows)
def test_a_metric_row_from_the_ingest_or_from_sql_is_the_same_row(row: MetricRow) -> None:
    stored = {**row._asdict(), "job_id": 7}  # what insert_points returns
    assert MetricRow.of(stored) == row
    assert MetricRow.of(SimpleNamespace(**stored)) == row  # a MetricPoint
    assert row.payload() == {k: v for k, v in row._asdict().items() if k != "id"}


@given(log_rows)
def test_a_log_row_from_the_ingest_or_from_sql_is_the_same_row(row: LogRow) -> None:
    stored = {**row._asdict(), "job_id": 7, "seq": 3}  # what insert_lines returns
    assert LogRow.of(stored) == row
    assert LogRow.of(SimpleNamespace(**stored)) == row  # a LogLine
    assert row.payload() == {
        "attempt": row.attempt,
        "replica": row.replica,
        "ts": row.ts,
        "line": row.line,
    }


def test_rows_travel_as_arrays_in_field_order() -> None:
    """The wire shape older readers parse: positional arrays, not objects."""
    entry = FeedEntry("metric", (MetricRow(5, 1, 0, 10, 0, "loss", 0.5, 1000.0),), Place(4, 7, 2))
    fields = entry.encode()
    assert fields["kind"] == "metric" and fields["prev"] == 4
    assert (fields["other"], fields["event"]) == (7, 2)
    assert FeedEntry.decode(
        {k: str(v) if isinstance(v, int) else v for k, v in fields.items()}
    ).place == Place(4, 7, 2)
    assert orjson.loads(fields["rows"]) == [[5, 1, 0, 10, 0, "loss", 0.5, 1000.0]]
    logs = FeedEntry("log", (LogRow(9, 1, 1, 2.5, "hello"),)).encode()
    assert orjson.loads(logs["rows"]) == [[9, 1, 1, 2.5, "hello"]]


@pytest.mark.parametrize(
    "fields",
    [
        {"kind": "video", "rows": "[]", "prev": "0"},
        {"rows": "[]", "prev": "0"},
        {"kind": "metric", "rows": "not json", "prev": "0"},
        {"kind": "metric", "rows": '{"a": 1}', "prev": "0"},
        {"kind": "log", "rows": '["abcde"]', "prev": "0"},  # a string is no row
        {"kind": "log", "rows": "[[1, 1, 0, 2.0]]", "prev": "0"},  # a field short
        {"kind": "metric", "rows": '[[1, 1, 0, 1, 0, "loss", 0.5, 1.0, 9]]', "prev": "0"},
        {"kind": "metric", "rows": '[["1", 1, 0, 1, 0, "loss", 0.5, 1.0]]', "prev": "0"},
        {"kind": "metric", "rows": "[[]]", "prev": "0"},
        {"kind": "log", "rows": "[]", "prev": "twelve"},
    ],
)
def test_an_entry_of_another_shape_is_refused(fields: dict[str, str]) -> None:
    with pytest.raises(FeedError):
        FeedEntry.decode(fields)
