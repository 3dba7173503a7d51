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

from collections.abc import Collection, Mapping, Sequence

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.models import JobEvent, LogLine, MetricPoint

Table = type[MetricPoint] | type[LogLine] | type[JobEvent]


def newest_id(session: Session, table: Table, job_id: int, before: int | None = None) -> int:
    """The id of the job's newest stored row of `table` (below `before`, if given; 0 if
    none): an index probe on `(job_id, id)`."""
    query = sa.select(sa.func.coalesce(sa.func.max(table.id), 0)).where(table.job_id == job_id)
    if before is not None:
        query = query.where(table.id < before)
    return int(session.execute(query).scalar_one())


def newest_rows(
    session: Session, firsts: Mapping[int, int | None], tables: Sequence[tuple[Table, bool]]
) -> dict[int, tuple[int, ...]]:
    """Per job of `firsts`, for each `(table, below)` the id of the job's newest row of
    `table` (below the job's given id where `below`; 0 if none). A job whose given id is
    None is read with no `below` table (`newest_ids`, `stream_marks`).

    One statement for every job and table on PostgreSQL (an index probe on `(job_id, id)`
    per job and table), where the ingest would otherwise wait for a round trip per job,
    per table, per read."""
    if not firsts:
        return {}
    if session.get_bind().dialect.name != "postgresql":  # in-process: no round trips
        return {
            job_id: tuple(
                newest_id(session, table, job_id, before if below else None)
                for table, below in tables
            )
            for job_id, before in firsts.items()
        }
    # Table names are the models' own, never a caller's string.
    columns = ", ".join(
        f"(SELECT coalesce(max(t{n}.id), 0) FROM {table.__tablename__} t{n} "
        f"WHERE t{n}.job_id = f.job_id{f' AND t{n}.id < f.before' if below else ''})"
        for n, (table, below) in enumerate(tables)
    )
    reply = session.execute(
        sa.text(
            f"SELECT f.job_id, {columns} FROM unnest(CAST(:jobs AS integer[]), "
            "CAST(:befores AS bigint[])) AS f(job_id, before)"
        ),
        {"jobs": list(firsts), "befores": list(firsts.values())},
    )
    return {int(row[0]): tuple(int(newest) for newest in row[1:]) for row in reply}


def newest_ids(session: Session, table: Table, job_ids: Collection[int]) -> dict[int, int]:
    """Per job, the id of its newest row of `table` (0 if none)."""
    marks = newest_rows(session, dict.fromkeys(job_ids), ((table, False),))
    return {job_id: ids[0] for job_id, ids in marks.items()}


def stream_marks(session: Session, job_ids: Collection[int]) -> dict[int, tuple[int, int]]:
    """Per job, its newest metric point and log line ids: where a status change stored now
    stands in the job's stream. The caller holds the jobs' row locks (FOR NO KEY UPDATE,
    which the ingest's FOR SHARE waits for): no row of these jobs commits until it does."""
    marks = newest_rows(session, dict.fromkeys(job_ids), ((MetricPoint, False), (LogLine, False)))
    return {job_id: (marks[job_id][0], marks[job_id][1]) for job_id in job_ids}
