"""A metric point's fields are declared once (services.wire.batches.Point): every later
shape of a point is that declaration plus where it belongs (the replica's head, the SQL
id), and its REST view is its stored row's."""

from __future__ import annotations

from services.jobs.schemas import MetricPointRead
from services.models import MetricPoint
from services.telemetry import metrics
from services.wire.batches import Point
from services.wire.feed import MetricRow

HEAD = ("attempt", "replica")  # which replica of which attempt reported it


def test_the_stored_row_is_the_point_with_its_replica_and_id() -> None:
    assert MetricRow._fields == ("id", *HEAD, *Point._fields)
    assert {c.name for c in MetricPoint.__table__.columns} == {"job_id", *MetricRow._fields}


def test_the_ingest_stores_the_point_as_declared() -> None:
    assert metrics.COLUMNS == ("job_id", *HEAD, *Point._fields)
    assert metrics.STORED == ("job_id", *MetricRow._fields)


def test_the_rest_view_is_the_stored_rows_payload() -> None:
    assert tuple(MetricPointRead.model_fields) == MetricRow._fields[1:]
    row = MetricRow(9, 1, 0, 5, None, "loss", 0.5, 1000.0)
    assert MetricPointRead(**row.payload()).model_dump() == row.payload()
