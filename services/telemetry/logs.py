"""Replica logs: the `cohort:logs` stream protocol, storing lines once, reading them back.

Agents tail each replica's log file and append batches to `cohort:logs`; the scheduler
leader stores them here, so logs outlive the replica's files and node. Every stream entry
has one field `data`, a `LogBatch` (services/wire/batches.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from services.jobs.stream_marks import newest_ids
from services.models import LogLine, MetricPoint
from services.telemetry.metrics import current_attempts
from services.wire.batches import LogBatch


def parse_log_batch(raw: str | bytes) -> list[dict[str, Any]]:
    """Rows from one logs stream entry (services/wire/batches.py: LogBatch). Malformed
    lines are dropped; a malformed entry or head raises WireError, a ValueError (the
    caller drops the whole entry)."""
    batch = LogBatch.decode(raw)
    head = {"job_id": batch.job_id, "attempt": batch.attempt, "replica": batch.replica}
    return [{**head, "seq": seq, "ts": ts, "line": line} for seq, ts, line in batch.lines]


def insert_lines(*, session: Session, rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Insert log rows once per `(job, attempt, replica, seq)`, skipping unknown jobs.
    Returns the new rows with their ids."""
    rows = list(rows)
    if not rows:
        return []
    # Any attempt's lines are kept (a failed attempt's output explains the failure).
    known = current_attempts(session=session, job_ids={row["job_id"] for row in rows})
    unique: dict[tuple[int, int, int, int], dict[str, Any]] = {}
    for row in rows:
        if row["job_id"] in known:
            unique.setdefault((row["job_id"], row["attempt"], row["replica"], row["seq"]), row)
    if not unique:
        return []
    # Where each line stands among the job's points (services/jobs/stream_marks.py): the
    # job's newest point now. The ingest stores points and lines one commit at a time
    # (workers/control/ingest.py), so none is stored between this read and the commit.
    marks = newest_ids(session, MetricPoint, {row["job_id"] for row in unique.values()})
    for row in unique.values():
        row["metric_mark"] = marks[row["job_id"]]
    insert = postgresql.insert if session.get_bind().dialect.name == "postgresql" else sqlite.insert
    table = cast(sa.Table, LogLine.__table__)  # a mapped class's table is a Table
    statement = (
        insert(table)
        .on_conflict_do_nothing(index_elements=["job_id", "attempt", "replica", "seq"])
        .returning(*table.c)
    )
    values = list(unique.values())
    inserted: list[dict[str, Any]] = []
    connection = session.connection()
    for start in range(0, len(values), 2000):
        inserted.extend(
            dict(r) for r in connection.execute(statement, values[start : start + 2000]).mappings()
        )
    return inserted


# The new lines as the ingest gets them: the job, then the live feed's row (LogRow).
STORED = ("job_id", "id", "attempt", "replica", "ts", "line")


def insert_line_rows(*, session: Session, rows: Iterable[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """`insert_lines` as tuples in STORED order, in id order (what the ingest publishes)."""
    stored = sorted(insert_lines(session=session, rows=rows), key=lambda row: row["id"])
    return [tuple(row[name] for name in STORED) for row in stored]


def read_logs(
    *,
    session: Session,
    job_id: int,
    replica: int | None = None,
    attempt: int | None = None,
    tail: int | None = None,
    limit: int = 10_000,
) -> list[LogLine]:
    """Lines of one job, oldest first; `tail` keeps the last n of them."""
    query = sa.select(LogLine).where(LogLine.job_id == job_id)
    if replica is not None:
        query = query.where(LogLine.replica == replica)
    if attempt is not None:
        query = query.where(LogLine.attempt == attempt)
    # Reading order: per attempt, as the agents read the lines (a replica's own lines
    # keep their file order: their ts never decreases).
    order = (LogLine.attempt, LogLine.ts, LogLine.replica, LogLine.seq)
    if tail is not None:
        newest = query.order_by(*(c.desc() for c in order)).limit(min(tail, limit))
        return list(reversed(session.execute(newest).scalars().all()))
    query = query.order_by(*order)
    return list(session.execute(query.limit(limit)).scalars())


def read_lines_after(
    *,
    session: Session,
    job_id: int,
    after_id: int,
    limit: int = 5000,
) -> list[LogLine]:
    """Lines of one job stored after id `after_id`, in id order (how live streams page)."""
    query = (
        sa.select(LogLine)
        .where(LogLine.job_id == job_id, LogLine.id > after_id)
        .order_by(LogLine.id)
        .limit(limit)
    )
    return list(session.execute(query).scalars())
