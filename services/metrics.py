"""Metrics: store replica batches once (idempotent), read them back with filters."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from services.models import Job, MetricPoint


def parse_batch(raw: str) -> list[dict[str, Any]]:
    """Rows from one stream entry: `{"job_id", "attempt", "replica", "points": [[step,
    epoch, name, value, ts], ...]}`. Malformed points are dropped, not fatal."""
    batch = json.loads(raw)
    head = {"job_id": int(batch["job_id"]), "attempt": int(batch["attempt"]),
            "replica": int(batch["replica"])}
    rows = []
    for point in batch.get("points", []):
        try:
            step, epoch, name, value, ts = point
            value = float(value)
        except (TypeError, ValueError):
            continue
        if not math.isfinite(value) or not isinstance(name, str) or not name or len(name) > 64:
            continue
        rows.append({**head, "step": int(step), "epoch": None if epoch is None else int(epoch),
                     "name": name, "value": value, "ts": float(ts)})
    return rows


def store_points(*, session: Session, rows: Iterable[dict[str, Any]]) -> int:
    """Insert metric rows, skipping any `(job, attempt, replica, step, name)` already stored
    and any row of a job that does not exist. Returns how many rows were new."""
    rows = list(rows)
    if not rows:
        return 0
    job_ids = {row["job_id"] for row in rows}
    known = set(session.execute(sa.select(Job.id).where(Job.id.in_(job_ids))).scalars())
    # The same key may come twice in one batch too (a redelivered stream entry).
    unique: dict[tuple[int, int, int, int, str], dict[str, Any]] = {}
    for row in rows:
        if row["job_id"] in known:
            unique.setdefault(
                (row["job_id"], row["attempt"], row["replica"], row["step"], row["name"]), row)
    if not unique:
        return 0
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    # RETURNING counts what was really new (rowcount is unreliable for executemany).
    statement = insert(MetricPoint).on_conflict_do_nothing(
        index_elements=["job_id", "attempt", "replica", "step", "name"]
    ).returning(MetricPoint.id)
    inserted = 0
    values = list(unique.values())
    connection = session.connection()
    for start in range(0, len(values), 5000):
        inserted += len(connection.execute(statement, values[start:start + 5000]).all())
    return inserted


def read_metrics(
    *, session: Session, job_id: int, names: list[str] | None = None,
    replica: int | None = None, attempt: int | None = None, since_step: int | None = None,
    limit: int = 10_000,
) -> list[MetricPoint]:
    """Points of one job in (attempt, step, replica, name) order."""
    query = sa.select(MetricPoint).where(MetricPoint.job_id == job_id)
    if names:
        query = query.where(MetricPoint.name.in_(names))
    if replica is not None:
        query = query.where(MetricPoint.replica == replica)
    if attempt is not None:
        query = query.where(MetricPoint.attempt == attempt)
    if since_step is not None:
        query = query.where(MetricPoint.step > since_step)
    query = query.order_by(MetricPoint.attempt, MetricPoint.step, MetricPoint.replica,
                           MetricPoint.name).limit(limit)
    return list(session.execute(query).scalars())
