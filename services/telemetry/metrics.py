"""Metrics: store replica batches once (idempotent), read them back with filters.

A point's shapes here, each said once: a stream entry (services/wire/batches.py
`MetricBatch` of `Point`s) becomes the staging row `COLUMNS` (the replica's head, then the
point's own fields), which COPY writes as is; the stored row comes back as `STORED` (the
job, then the live feed's `MetricRow`), which services/telemetry/live.py publishes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from operator import itemgetter
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.jobs.stream_marks import newest_id
from services.models import Job, MetricPoint
from services.wire.batches import MetricBatch, Point
from services.wire.feed import MetricRow

# A point as the ingest stores it: whose (the replica's head), then the point itself.
COLUMNS = ("job_id", "attempt", "replica", *Point._fields)
# A stored point as the ingest gets it back: the job, then the live feed's row.
STORED = ("job_id", *MetricRow._fields)
_row_of = itemgetter(*COLUMNS)  # C-level: runs once per point of a dict caller


def parse_rows(raw: str | bytes) -> list[tuple[Any, ...]]:
    """The rows (in COLUMNS order) of one metrics stream entry (services/wire/batches.py:
    MetricBatch), the ingest's hot path: no dict per point. Malformed points are
    dropped; a malformed entry or head raises WireError, a ValueError (the caller drops
    the whole entry)."""
    batch = MetricBatch.decode(raw)
    head = (batch.job_id, batch.attempt, batch.replica)
    return [head + point for point in batch.points]


def parse_batch(raw: str | bytes) -> list[dict[str, Any]]:
    """`parse_rows` with the columns named, for callers that read the rows by name."""
    return [dict(zip(COLUMNS, row, strict=True)) for row in parse_rows(raw)]


def store_points(*, session: Session, rows: Iterable[Mapping[str, Any]]) -> int:
    """Insert metric rows, skipping any `(job, attempt, replica, step, name)` already stored
    and any row of a job that does not exist. Returns how many rows were new."""
    return len(insert_points(session=session, rows=rows))


def insert_points(*, session: Session, rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Like `store_points`, but returns the new rows with their ids (for the live streams),
    in id order: `insert_point_rows` with the columns named, of rows given by name."""
    stored = insert_point_rows(session=session, rows=map(_row_of, rows))
    return [dict(zip(STORED, row, strict=True)) for row in stored]


def insert_point_rows(
    *, session: Session, rows: Iterable[tuple[Any, ...]]
) -> list[tuple[Any, ...]]:
    """Store metric rows (in COLUMNS order) once; returns the new ones as tuples in STORED
    order, in id order (the ingest's hot path: no dict per point).

    Fenced by attempt: a point of an attempt that is no longer the job's current one
    (a replica of a torn-down gang still talking) is refused, like every other late
    report of an old attempt.
    """
    rows = list(rows)
    if not rows:
        return []
    current = current_attempts(session=session, job_ids={row[0] for row in rows})
    # A key that comes twice (a redelivered stream entry) needs no filtering here:
    # ON CONFLICT DO NOTHING / INSERT OR IGNORE skip it within one statement too.
    values = [row for row in rows if current.get(row[0]) == row[1]]  # job_id, attempt
    if not values:
        return []
    if session.get_bind().dialect.name == "postgresql":
        return _insert_postgresql(session, values)
    return _insert_sqlite(session, values)


def current_attempts(*, session: Session, job_ids: set[int]) -> dict[int, int]:
    """Each existing job's current attempt. The job rows stay locked FOR SHARE until the
    caller commits (a job cannot be deleted under the rows being stored): what a foreign
    key would check per row, once per job. FOR SHARE, not the weaker KEY SHARE: a status
    change of one of these jobs (FOR NO KEY UPDATE, services/jobs/transitions.py) waits for
    this commit, and this waits for it, so the change's marks (the job's newest point and
    line, services/jobs/stream_marks.py) say exactly which rows were stored before it. In
    id order, as status changes lock: the two cannot deadlock. SQLite ignores it."""
    return dict(
        session.execute(
            sa.select(Job.id, Job.attempt)
            .where(Job.id.in_(job_ids))
            .order_by(Job.id)
            .with_for_update(read=True)
        )
        .tuples()
        .all()
    )


# Steps per rollup bucket (alembic 0008 filled the table with this width: changing it
# needs a migration that rebuilds metric_rollups).
ROLLUP_STEPS = 100
_ROLLUP_INSERT = (
    "INSERT INTO metric_rollups (job_id, attempt, replica, name, bucket, points, "
    "total, first_step, last_step, last_epoch, last_ts)"
)
_COPY_TYPES = ("int4", "int4", "int4", "int4", "int4", "varchar", "float8", "float8")


def _driver_connection(session: Session) -> Any:
    """The DB-API connection under the session's (psycopg's or sqlite3's), for COPY and
    executemany."""
    raw = session.connection().connection.driver_connection
    if raw is None:  # only a detached pool connection has none
        raise RuntimeError("the session's connection has no DB-API connection")
    return raw


def _insert_postgresql(session: Session, values: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    # COPY into a session-local staging table, then one INSERT ... SELECT: several times
    # faster than a multi-row INSERT ... RETURNING, and still one statement decides
    # what is new (ON CONFLICT DO NOTHING against the unique key).
    columns = ", ".join(COLUMNS)
    raw = _driver_connection(session)
    with raw.cursor() as cursor:
        # Two statements, one round trip (no parameters: the simple query protocol).
        cursor.execute(
            "CREATE TEMP TABLE IF NOT EXISTS metric_stage (job_id integer, attempt integer, "
            "replica integer, step integer, epoch integer, name varchar(64), "
            "value double precision, ts double precision) ON COMMIT DELETE ROWS; "
            "TRUNCATE metric_stage"
        )
        # Binary COPY: the server skips parsing text, the client encodes in C.
        with cursor.copy(f"COPY metric_stage ({columns}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(_COPY_TYPES)
            for row in values:
                copy.write_row(row)
        # One statement stores the new points and adds exactly them to the rollups.
        cursor.execute(
            f"WITH new AS (INSERT INTO metric_points ({columns}) "
            f"SELECT {columns} FROM metric_stage "
            "ON CONFLICT (job_id, attempt, replica, step, name) DO NOTHING "
            f"RETURNING id, {columns}), "
            f"rolled AS ({_ROLLUP_INSERT} SELECT job_id, attempt, replica, name, "
            f"step / {ROLLUP_STEPS}, count(*), sum(value), min(step), max(step), max(epoch), "
            f"max(ts) FROM new GROUP BY job_id, attempt, replica, name, step / {ROLLUP_STEPS} "
            "ON CONFLICT (job_id, attempt, replica, name, bucket) DO UPDATE SET "
            "points = metric_rollups.points + excluded.points, "
            "total = metric_rollups.total + excluded.total, "
            "first_step = least(metric_rollups.first_step, excluded.first_step), "
            "last_step = greatest(metric_rollups.last_step, excluded.last_step), "
            "last_epoch = greatest(metric_rollups.last_epoch, excluded.last_epoch), "
            "last_ts = greatest(metric_rollups.last_ts, excluded.last_ts)) "
            f"SELECT {', '.join(STORED)} FROM new ORDER BY id"
        )
        rows: list[tuple[Any, ...]] = cursor.fetchall()  # a DB-API cursor: untyped
        return rows


def _insert_sqlite(session: Session, values: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    # SQLite has one writer at a time and the leader's ingest is the only writer of
    # metric points, so the new rows are exactly those above the largest id before. A
    # DB-API executemany of INSERT OR IGNORE runs in C: several times faster than
    # SQLAlchemy's multi-row INSERT ... RETURNING.
    columns = ", ".join(COLUMNS)
    cursor = _driver_connection(session).cursor()
    try:
        cursor.execute("SELECT coalesce(max(id), 0) FROM metric_points")
        before = cursor.fetchone()[0]
        cursor.executemany(
            f"INSERT OR IGNORE INTO metric_points ({columns}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            values,
        )
        cursor.execute(
            f"SELECT {', '.join(STORED)} FROM metric_points WHERE id > ? ORDER BY id", (before,)
        )
        inserted: list[tuple[Any, ...]] = cursor.fetchall()  # a DB-API cursor: untyped
        # SQLite's max() of a NULL is NULL: an absent epoch is -1 for the comparison.
        cursor.executemany(
            f"{_ROLLUP_INSERT} VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (job_id, attempt, replica, name, bucket) DO UPDATE SET "
            "points = points + excluded.points, total = total + excluded.total, "
            "first_step = min(first_step, excluded.first_step), "
            "last_step = max(last_step, excluded.last_step), "
            "last_epoch = nullif(max(coalesce(last_epoch, -1), "
            "coalesce(excluded.last_epoch, -1)), -1), "
            "last_ts = max(last_ts, excluded.last_ts)",
            _rollups_of(inserted),
        )
        return inserted
    finally:
        cursor.close()


def _rollups_of(stored: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Rollup rows of newly stored points (what the PostgreSQL statement computes)."""
    groups: dict[tuple[Any, ...], list[Any]] = {}
    for row in (dict(zip(STORED, r, strict=True)) for r in stored):
        key = (
            row["job_id"],
            row["attempt"],
            row["replica"],
            row["name"],
            row["step"] // ROLLUP_STEPS,
        )
        group = groups.get(key)
        if group is None:
            groups[key] = [1, row["value"], row["step"], row["step"], row["epoch"], row["ts"]]
            continue
        group[0] += 1
        group[1] += row["value"]
        group[2] = min(group[2], row["step"])
        group[3] = max(group[3], row["step"])
        if row["epoch"] is not None:
            group[4] = row["epoch"] if group[4] is None else max(group[4], row["epoch"])
        group[5] = max(group[5], row["ts"])
    return [(*key, *group) for key, group in groups.items()]


def read_metrics(
    *,
    session: Session,
    job_id: int,
    names: list[str] | None = None,
    replica: int | None = None,
    attempt: int | None = None,
    since_step: int | None = None,
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
    query = query.order_by(
        MetricPoint.attempt, MetricPoint.step, MetricPoint.replica, MetricPoint.name
    ).limit(limit)
    return list(session.execute(query).scalars())


def newest_point_id(*, session: Session, job_id: int, before: int | None = None) -> int:
    """The id of the job's newest stored point (below `before`, if given; 0 if none):
    where a live stream of the points stored from now on starts."""
    return newest_id(session, MetricPoint, job_id, before)


def read_points_after(
    *,
    session: Session,
    job_id: int,
    after_id: int,
    limit: int = 5000,
) -> list[MetricPoint]:
    """Points of one job stored after id `after_id`, in id order (how live streams page)."""
    query = (
        sa.select(MetricPoint)
        .where(MetricPoint.job_id == job_id, MetricPoint.id > after_id)
        .order_by(MetricPoint.id)
        .limit(limit)
    )
    return list(session.execute(query).scalars())
