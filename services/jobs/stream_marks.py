"""Where a job's stream stands: the ids of its newest stored metric point, log line and
status change, read for many jobs at once (an index probe on `(job_id, id)` per job).

A job's stream (services/telemetry/stream_order.py) is one order of three kinds of stored
rows, each numbered by its own SQL id. A status change records the job's newest point and
line when it is stored (`JobEvent.metric_mark`, `.log_mark`), a log line the job's newest
point (`LogLine.metric_mark`), so that order can be read back from SQL alone. The ingest
and status changes write them under locks that keep them true (services/telemetry/metrics.py
`current_attempts`, workers/control/ingest.py).
"""

from __future__ import annotations

from collections.abc import Collection

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.models import JobEvent, LogLine, MetricPoint

Table = type[MetricPoint] | type[LogLine] | type[JobEvent]
NO_BOUND = 2**62  # above every id


def newest_id(session: Session, table: Table, job_id: int, before: int | None = None) -> int:
    """The id of the job's newest stored row of `table` (below `before`, if given; 0 if
    none): an index probe on `(job_id, id)`."""
    query = sa.select(sa.func.coalesce(sa.func.max(table.id), 0)).where(table.job_id == job_id)
    if before is not None:
        query = query.where(table.id < before)
    return int(session.execute(query).scalar_one())


def newest_ids_before(session: Session, table: Table, firsts: dict[int, int]) -> dict[int, int]:
    """Per job of `firsts`, the id of its newest row of `table` below the given id (0 if
    none): one statement for all of them on PostgreSQL (an index probe on `(job_id, id)`
    per job), where the ingest would otherwise wait for a round trip per job per read."""
    if not firsts:
        return {}
    if session.get_bind().dialect.name != "postgresql":  # in-process: no round trips
        return {
            job_id: newest_id(session, table, job_id, before) for job_id, before in firsts.items()
        }
    name = table.__tablename__
    reply = session.execute(
        sa.text(
            f"SELECT f.job_id, (SELECT coalesce(max(t.id), 0) FROM {name} t "
            "WHERE t.job_id = f.job_id AND t.id < f.before) "
            "FROM unnest(CAST(:jobs AS integer[]), CAST(:befores AS bigint[])) AS f(job_id, before)"
        ),
        {"jobs": list(firsts), "befores": list(firsts.values())},
    )
    return {int(job_id): int(newest) for job_id, newest in reply}


def newest_ids(session: Session, table: Table, job_ids: Collection[int]) -> dict[int, int]:
    """Per job, the id of its newest row of `table` (0 if none)."""
    return newest_ids_before(session, table, dict.fromkeys(job_ids, NO_BOUND))


def stream_marks(session: Session, job_ids: Collection[int]) -> dict[int, tuple[int, int]]:
    """Per job, its newest metric point and log line ids: where a status change stored now
    stands in the job's stream. The caller holds the jobs' row locks (FOR NO KEY UPDATE,
    which the ingest's FOR SHARE waits for): no row of these jobs commits until it does."""
    points = newest_ids(session, MetricPoint, job_ids)
    lines = newest_ids(session, LogLine, job_ids)
    return {job_id: (points[job_id], lines[job_id]) for job_id in job_ids}
