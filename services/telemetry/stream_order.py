"""A job's stream in one order: its metric points, log lines and status changes as they
were stored, read back from SQL alone.

Each kind is numbered by its own SQL id, and within a kind ids are stored in order (the
leader's ingest is the one writer of points and of lines; a job's status changes are
written under its row lock). Between kinds, the order is recorded when a row is stored
(services/jobs/stream_marks.py): a status change carries the job's newest point and line
then (`metric_mark`, `log_mark`), a log line the job's newest point. So:

- point p comes before line l  iff  p.id <= l.metric_mark;
- point p comes before change e iff  p.id <= e.metric_mark, line l iff l.id <= e.log_mark;
- within a kind, by id.

The ingest stores points and lines one commit at a time, and a status change of a job
waits for the ingest's commit of that job's rows (and the reverse), so these marks are
exact, and the order is the order of the commits: what a follower that never left was
sent, and what one that comes back reads here. One exception, by rule: a job's terminal
status comes after every row of the job (services/telemetry/settling.py says when the job
will have no more), and ends the stream.

`in_order` is the merge; `read_segment` reads what it merges.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Collection
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.db import session_scope
from services.models import JobEvent, LogLine, MetricPoint
from services.statuses import TERMINAL_STATUSES, JobStatus
from services.telemetry.cursor import Cursor
from services.wire.feed import LogRow, MetricRow

PAGE = 5000  # rows of a kind per read
EVENT_PAGE = 1000  # status changes per read


class StatusChange(NamedTuple):
    """One stored status change of a job (a `JobEvent`), with its place in the stream."""

    id: int
    attempt: int
    from_status: str | None
    to_status: str
    reason: str
    at: dt.datetime
    metric_mark: int
    log_mark: int

    @property
    def terminal(self) -> bool:
        return JobStatus(self.to_status) in TERMINAL_STATUSES

    def payload(self) -> dict[str, Any]:
        """What a stream client gets about the change itself (beside the job's view)."""
        return {
            "id": self.id,
            "from_status": self.from_status,
            "to_status": self.to_status,
            "attempt": self.attempt,
            "reason": self.reason,
            "at": self.at.isoformat(),
        }

    def event_data(self, snapshot: dict[str, Any]) -> dict[str, Any]:
        """Its status event's data: the job as `GET /jobs/{id}` sends it now (`snapshot`),
        with the status and attempt of the change, and the change itself (`change`). The
        newest change's event is the job as REST reads it."""
        return {
            **snapshot,
            "status": self.to_status,
            "attempt": self.attempt,
            "change": self.payload(),
        }


@dataclasses.dataclass
class Segment:
    """Stored items of a job after a cursor, each kind in id order. `complete[kind]`:
    every item of the kind up to the segment's bound is here (False: a page was full)."""

    metrics: list[MetricRow]
    logs: list[tuple[LogRow, int]]  # (line, its metric_mark)
    events: list[StatusChange]
    complete: dict[str, bool]


# (kind, the row or change, the cursor after it as an event id): ("metric", MetricRow, id),
# ("log", LogRow, id) or ("status", StatusChange, id).
Item = tuple[str, Any, str]


def in_order(segment: Segment, cursor: Cursor, kinds: Collection[str]) -> list[Item]:
    """The segment's items the cursor has not had, in stream order, for a follower of
    `kinds`; moves the cursor past each. Stops where the next item is not known yet (a
    kind's page ended, or a status change whose rows are not in the segment)."""
    metrics = [m for m in segment.metrics if m.id > cursor.metric] if "metric" in kinds else []
    logs = [x for x in segment.logs if x[0].id > cursor.log] if "log" in kinds else []
    events = [e for e in segment.events if e.id > cursor.event] if "status" in kinds else []
    follows_metrics, follows_logs, follows_status = (
        "metric" in kinds,
        "log" in kinds,
        "status" in kinds,
    )
    out: list[Item] = []
    i = j = k = 0
    while True:
        m = metrics[i] if i < len(metrics) else None
        line = logs[j] if j < len(logs) else None
        e = events[k] if k < len(events) else None
        if (
            (m is None and not segment.complete["metric"] and follows_metrics)
            or (line is None and not segment.complete["log"] and follows_logs)
            or (e is None and not segment.complete["status"] and follows_status)
        ):
            break  # the next item of that kind is on a page not read yet
        if (
            m is not None
            and (line is None or line[1] >= m.id)
            and (e is None or e.metric_mark >= m.id)
        ):
            cursor.metric, i = m.id, i + 1
            out.append(("metric", m, str(cursor)))
        elif (
            line is not None
            and (not follows_metrics or cursor.metric >= line[1])
            and (e is None or e.log_mark >= line[0].id)
        ):
            cursor.log, j = line[0].id, j + 1
            out.append(("log", line[0], str(cursor)))
        elif (
            e is not None
            and (not follows_metrics or cursor.metric >= e.metric_mark)
            and (not follows_logs or cursor.log >= e.log_mark)
        ):
            cursor.event, k = e.id, k + 1
            out.append(("status", e, str(cursor)))
        else:
            # Nothing left, or the next item waits for rows stored before it that this
            # segment does not hold (committed after its reads): the next read has them.
            break
    return out


def read_segment(
    job_id: int,
    cursor: Cursor,
    kinds: Collection[str],
    bound: Cursor | None = None,
    hold_terminal: bool = True,
) -> Segment:
    """In one transaction: the job's items of `kinds` after `cursor` (up to `bound`, when
    given), a page of each. Points are read before lines and lines before status changes:
    whatever commits between the reads comes after what was read (the merge waits for it
    where it comes before). `hold_terminal`: leave out the terminal status (it is sent
    once the job will have no more rows)."""
    complete = {"metric": True, "log": True, "status": True}
    with session_scope() as session:
        metrics: list[MetricRow] = []
        if "metric" in kinds:
            query = sa.select(MetricPoint).where(
                MetricPoint.job_id == job_id, MetricPoint.id > cursor.metric
            )
            if bound is not None:
                query = query.where(MetricPoint.id <= bound.metric)
            metrics = [
                MetricRow.of(p)
                for p in session.execute(query.order_by(MetricPoint.id).limit(PAGE)).scalars()
            ]
            complete["metric"] = len(metrics) < PAGE
        logs: list[tuple[LogRow, int]] = []
        if "log" in kinds:
            lines = sa.select(LogLine).where(LogLine.job_id == job_id, LogLine.id > cursor.log)
            if bound is not None:
                lines = lines.where(LogLine.id <= bound.log)
            logs = [
                (LogRow.of(line), line.metric_mark or 0)
                for line in session.execute(lines.order_by(LogLine.id).limit(PAGE)).scalars()
            ]
            complete["log"] = len(logs) < PAGE
        events: list[StatusChange] = []
        if "status" in kinds:
            events = read_changes(
                session, job_id, cursor.event, None if bound is None else bound.event
            )
            complete["status"] = len(events) < EVENT_PAGE
            if hold_terminal:
                events = [e for e in events if not e.terminal]
    return Segment(metrics, logs, events, complete)


def read_changes(
    session: Session, job_id: int, after: int, upto: int | None = None
) -> list[StatusChange]:
    """The job's status changes after id `after` (up to `upto`), oldest first."""
    query = sa.select(JobEvent).where(JobEvent.job_id == job_id, JobEvent.id > after)
    if upto is not None:
        query = query.where(JobEvent.id <= upto)
    return [
        StatusChange(
            e.id,
            e.attempt,
            None if e.from_status is None else str(e.from_status),
            str(e.to_status),
            e.reason,
            e.created_at,
            e.metric_mark or 0,
            e.log_mark or 0,
        )
        for e in session.execute(query.order_by(JobEvent.id).limit(EVENT_PAGE)).scalars()
    ]


def terminal_change(job_id: int) -> StatusChange | None:
    """In its own transaction: the job's terminal status change, if it has one."""
    with session_scope() as session:
        newest = session.execute(
            sa.select(sa.func.max(JobEvent.id)).where(JobEvent.job_id == job_id)
        ).scalar()
        if newest is None:
            return None
        changes = read_changes(session, job_id, int(newest) - 1, int(newest))
    return changes[0] if changes and changes[0].terminal else None
