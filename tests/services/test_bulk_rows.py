"""services/jobs/bulk_rows.py: the rows one unnest statement stores are those the
executemany of the same rows stores, column for column, in the same order."""

from __future__ import annotations

import datetime as dt
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.cluster.nodes import Heartbeat, record_heartbeats
from services.jobs.bulk_rows import insert_rows
from services.models import JobEvent, Replica, utcnow
from services.statuses import JobStatus
from tests.factories import create_job, create_token, replica_rows

REPLICAS = cast(sa.Table, Replica.__table__)
EVENTS = cast(sa.Table, JobEvent.__table__)


def _stored(session: Session, table: sa.Table, job_id: int) -> list[dict[str, Any]]:
    """Every row of the job in `table`, by id, as SQL holds it (JSON as its text, so a
    JSON null and an SQL NULL differ), less the id and the creation time."""
    columns = [
        sa.cast(c, sa.Text).label(c.name) if isinstance(c.type, sa.JSON) else c
        for c in table.columns
        if c.name not in ("id", "created_at")
    ]
    query = sa.select(*columns).where(table.c.job_id == job_id).order_by(table.c.id)
    return [dict(row._mapping) for row in session.execute(query)]


def _created(session: Session, table: sa.Table, job_id: int) -> list[dt.datetime]:
    query = sa.select(table.c.created_at).where(table.c.job_id == job_id).order_by(table.c.id)
    return list(session.execute(query).scalars())


def test_replicas_stored_in_one_statement_are_those_the_executemany_stores(
    session: Session,
) -> None:
    _, token = create_token(session)
    ours, theirs = (create_job(session, token.project_id, replicas=3) for _ in range(2))
    record_heartbeats(
        session=session,
        beats=[Heartbeat(node_id="n1", address="10.1.0.1", slots=8, gpus=0, at=utcnow())],
    )
    statements: list[str] = []
    sa.event.listen(session.get_bind(), "before_cursor_execute", lambda *a: statements.append(a[2]))
    now = utcnow()
    insert_rows(session, REPLICAS, replica_rows(ours.id, 3, now))
    assert len(statements) == 1  # one statement for all three
    session.execute(sa.insert(Replica), replica_rows(theirs.id, 3, now))
    mine, others = _stored(session, REPLICAS, ours.id), _stored(session, REPLICAS, theirs.id)
    assert [{**row, "job_id": 0} for row in mine] == [{**row, "job_id": 0} for row in others]
    assert [row["index"] for row in mine] == [0, 1, 2]  # numbered in the rows' order


def test_events_stored_in_one_statement_get_their_defaults(session: Session) -> None:
    """A column the rows leave out gets its Python-side default (`created_at`: the time
    of the insert, as the executemany's) and no other column changes."""
    _, token = create_token(session)
    ours, theirs = (create_job(session, token.project_id) for _ in range(2))
    before = utcnow()

    def rows(job_id: int) -> list[dict[str, Any]]:
        return [
            {
                "job_id": job_id,
                "attempt": 1,
                "from_status": status,
                "to_status": JobStatus.SCHEDULED,
                "reason": f"placed {i}",
                "metric_mark": 7,
                "log_mark": None,
            }
            for i, status in enumerate((JobStatus.QUEUED, None))
        ]

    insert_rows(session, EVENTS, rows(ours.id))
    session.execute(sa.insert(JobEvent), rows(theirs.id))
    # The last two: each job's first event is its submission's.
    mine, others = _stored(session, EVENTS, ours.id)[-2:], _stored(session, EVENTS, theirs.id)[-2:]
    assert [{**row, "job_id": 0} for row in mine] == [{**row, "job_id": 0} for row in others]
    assert all(before <= at <= utcnow() for at in _created(session, EVENTS, ours.id)[-2:])
