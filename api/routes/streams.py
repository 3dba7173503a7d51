"""Live streams (Server-Sent Events): one job's status, metrics and logs; the project's jobs.

`GET /jobs/{id}/stream` sends `status` (data: JobRead), `metric` and `log` events. Every
event's id is the cursor after it, `<metric id>.<log id>.<job event id>` (SQL ids), so a
client that reconnects with `Last-Event-ID` gets exactly what it missed. Each client reads
SQL history after its cursor, then follows the job's live feed in Redis (services/telemetry/live.py)
with its own XREAD cursor: a slow client holds up nobody, neither other clients nor the
ingest. The feed position is taken *before* the history is read, and rows are filtered by
id, so nothing committed in between is lost or sent twice. Each feed entry names the newest
id stored before its rows (`prev`): a client behind it missed an entry (lost with a Redis
restart, or a publish that failed) and reads those rows from SQL before the entry's.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import anyio
import redis.asyncio as aredis
from fastapi import APIRouter, Cookie, Depends, Header, Query
from fastapi.exceptions import RequestValidationError
from fastapi.sse import KEEPALIVE_COMMENT, EventSourceResponse, ServerSentEvent, format_sse_event

from api.deps import get_token
from services.db import session_scope
from services.jobs import store as jobs
from services.settings import get_settings
from services.telemetry import live, logs, metrics
from services.telemetry.stream_state import job_snapshot, newest_ids, project_changes

router = APIRouter(tags=["streams"])

PAGE = 5000  # history rows per SQL read
STATUS_POLL = 1.0  # seconds between status checks (statuses change rarely)
KINDS = ("status", "metric", "log")
KEEPALIVE = 15.0  # seconds of silence before a comment line
T = TypeVar("T")


@dataclass
class Cursor:
    """What a client has seen: the last metric, log line and job event ids."""

    metric: int = 0
    log: int = 0
    event: int = 0

    def __str__(self) -> str:
        return f"{self.metric}.{self.log}.{self.event}"

    def at(self, kind: str) -> int:
        """The id of the last `metric` or `log` row sent."""
        return self.metric if kind == "metric" else self.log

    def move(self, kind: str, row_id: int) -> None:
        if kind == "metric":
            self.metric = row_id
        else:
            self.log = row_id

    @classmethod
    def parse(cls, raw: str, field: str) -> Cursor:
        parts = raw.strip().split(".")
        if len(parts) != 3 or not all(p.isdigit() and len(p) < 19 for p in parts):
            raise RequestValidationError([{
                "loc": ("header", field), "type": "value_error",
                "msg": f"{raw[:40]!r} is not an event id of this stream (three numbers "
                       "joined by dots); omit it to start from the beginning"}])
        return cls(*(int(p) for p in parts))


async def _sql(fn: Callable[..., T], *args: Any) -> T:
    # Sync SQLAlchemy off the event loop; short reads only.
    return await anyio.to_thread.run_sync(fn, *args)


def _metric_data(row: list[Any]) -> dict[str, Any]:
    _id, attempt, replica, step, epoch, name, value, ts = row
    return {"attempt": attempt, "replica": replica, "step": step, "epoch": epoch,
            "name": name, "value": value, "ts": ts}


def _log_data(row: list[Any]) -> dict[str, Any]:
    _id, attempt, replica, ts, line = row
    return {"attempt": attempt, "replica": replica, "ts": ts, "line": line}


def _history_page(kind: str, job_id: int, after: int) -> list[list[Any]]:
    with session_scope() as session:
        if kind == "metric":
            return [[p.id, p.attempt, p.replica, p.step, p.epoch, p.name, p.value, p.ts]
                    for p in metrics.read_points_after(session=session, job_id=job_id,
                                                       after_id=after, limit=PAGE)]
        return [[r.id, r.attempt, r.replica, r.ts, r.line]
                for r in logs.read_lines_after(session=session, job_id=job_id,
                                               after_id=after, limit=PAGE)]


def _frame(kind: str, cursor: Cursor, data: Any) -> bytes:
    return format_sse_event(data_str=json.dumps(data, separators=(",", ":")), event=kind,
                            id=str(cursor))


def _rows_frames(kind: str, rows: list[list[Any]], cursor: Cursor) -> list[bytes]:
    """Encoded events for rows the client has not had yet (ids at or below its cursor
    were sent already: from history, or from an overlapping feed entry)."""
    data = _metric_data if kind == "metric" else _log_data
    frames = []
    for row in rows:
        if row[0] <= cursor.at(kind):
            continue
        cursor.move(kind, row[0])
        frames.append(_frame(kind, cursor, data(row)))
    return frames


# Encoded feed entries, shared by the clients of this process: clients that are caught up
# have the same cursor, so one encoding serves them all (key: entry, kind, and the other
# two cursor parts; valid for a client whose cursor is below the entry's first row).
_encoded: OrderedDict[tuple[str, str, int, int], tuple[int, int, bytes]] = OrderedDict()
ENCODED_ENTRIES = 4096


def _entry_frames(entry_id: str, kind: str, raw: str, cursor: Cursor) -> bytes:
    """The encoded events of one live-feed entry for this client."""
    other = cursor.at("log" if kind == "metric" else "metric")
    key = (entry_id, kind, other, cursor.event)
    mine = cursor.at(kind)
    hit = _encoded.get(key)
    if hit is not None and mine < hit[0]:
        cursor.move(kind, hit[1])
        return hit[2]
    rows = json.loads(raw)
    encoded = b"".join(_rows_frames(kind, rows, cursor))
    if rows and mine < rows[0][0]:  # the whole entry was new to this client: shareable
        _encoded[key] = (rows[0][0], rows[-1][0], encoded)
        if len(_encoded) > ENCODED_ENTRIES:
            _encoded.popitem(last=False)
    return encoded


async def _stored_after(kind: str, job_id: int, cursor: Cursor,
                       upto: int | None = None) -> AsyncIterator[list[bytes]]:
    """Events for the job's stored rows of `kind` after the client's cursor, from SQL, a
    page at a time, while the cursor is below `upto` (None: up to the newest row). The
    history a client starts with, and rows the live feed did not bring."""
    while upto is None or upto > cursor.at(kind):
        page = await _sql(_history_page, kind, job_id, cursor.at(kind))
        yield _rows_frames(kind, page, cursor)
        if len(page) < PAGE:
            break


class _PerJob:
    """One SQL read per job per STATUS_POLL s, shared by every client of this process:
    100 clients of one job cost one read a second, not 100."""

    def __init__(self, read: Callable[[int], Any]) -> None:
        self.read = read
        self.values: dict[int, tuple[float, Any]] = {}

    async def __call__(self, job_id: int) -> Any:
        now = time.monotonic()
        hit = self.values.get(job_id)
        if hit is not None and now - hit[0] < STATUS_POLL:
            return hit[1]
        value = await _sql(self.read, job_id)
        if len(self.values) > 10_000:
            self.values.clear()
        self.values[job_id] = (now, value)
        return value


_snapshot = _PerJob(job_snapshot)  # (the job as JSON, its newest event id, a fingerprint)
_newest = _PerJob(newest_ids)  # the job's newest point and line ids


def chosen_kinds(
    kinds: Annotated[list[str] | None, Query(max_length=8)] = None,
) -> set[str]:
    """The `kinds` query: some of status, metric, log (all when absent)."""
    chosen = set(kinds or KINDS)
    unknown = chosen - set(KINDS)
    if unknown:
        raise RequestValidationError([{
            "loc": ("query", "kinds"), "type": "value_error",
            "msg": f"unknown kind {sorted(unknown)[0]!r}; use status, metric or log"}])
    return chosen


def resume_point(
    last_event_id: Annotated[str | None, Header(max_length=64)] = None,
    resume: Annotated[str | None, Query(alias="last_event_id", max_length=64)] = None,
) -> Cursor | None:
    """Where a reconnecting client left off: `Last-Event-ID`, or `?last_event_id=`."""
    # A dependency, so a bad id is a 422 before the stream starts.
    if last_event_id:
        return Cursor.parse(last_event_id, "last-event-id")
    if resume:
        return Cursor.parse(resume, "last_event_id")
    return None


def project_resume_point(
    last_event_id: Annotated[str | None, Header(max_length=32)] = None,
    resume: Annotated[str | None, Query(alias="last_event_id", max_length=32)] = None,
) -> int | None:
    """Where a project stream client left off: a job-event id."""
    raw = last_event_id or resume
    if raw is not None and not (raw.strip().isdigit() and len(raw.strip()) < 19):
        raise RequestValidationError([{
            "loc": ("header", "last-event-id"), "type": "value_error",
            "msg": f"{raw[:40]!r} is not an event id of this stream (a number); omit it"}])
    return int(raw) if raw is not None else None


def stream_caller(
    authorization: Annotated[str | None, Header()] = None,
    cohort_token: Annotated[str | None, Cookie()] = None,
) -> int:
    """The caller's project id (401 otherwise), from a session of its own.

    Streams last for hours, so they must not keep a request session's pooled connection;
    and one short session in one worker thread cannot deadlock the way several sync
    dependencies can when a burst of clients holds every thread and every connection.
    """
    with session_scope() as session:
        return get_token(session=session, authorization=authorization,
                         cohort_token=cohort_token).project_id


def stream_job_id(job_id: int, project_id: Annotated[int, Depends(stream_caller)]) -> int:
    """The job in the path if the caller's project owns it (404 otherwise)."""
    with session_scope() as session:
        return jobs.read_job(session=session, project_id=project_id, job_id=job_id).id


@router.get("/jobs/{job_id}/stream",
            responses={200: {"content": {"text/event-stream": {}},
                             "description": "`status`, `metric` and `log` events"}})
async def stream_job(
    job_id: Annotated[int, Depends(stream_job_id)],
    start: Annotated[Cursor | None, Depends(resume_point)],
    chosen: Annotated[set[str], Depends(chosen_kinds)],
) -> EventSourceResponse:
    """Live `status`, `metric` and `log` events of a job: history first, then live.
    Reconnect with `Last-Event-ID` (or `?last_event_id=`) to get exactly what you missed;
    `kinds` picks some of the three (e.g. `kinds=log` to follow logs)."""
    cursor = Cursor(start.metric, start.log, start.event) if start else Cursor()
    # Events are encoded with FastAPI's own SSE encoder but written a batch at a time
    # (one feed entry, one history page): one write per event would cap a process at a
    # few thousand events a second across all clients.
    return EventSourceResponse(_job_events(job_id, cursor, resumed=start is not None,
                                           chosen=chosen),
                               headers={"Cache-Control": "no-cache",
                                        "X-Accel-Buffering": "no"})


async def _job_events(job_id: int, cursor: Cursor, *, resumed: bool,
                      chosen: set[str]) -> AsyncIterator[bytes]:
    client = aredis.Redis.from_url(get_settings().redis_url, decode_responses=True)
    try:
        key = live.live_key(job_id)
        # Taken before the history is read: whatever commits after that read is on the
        # feed after this position.
        newest = await client.xrevrange(key, count=1)
        feed_position = newest[0][0] if newest else "0-0"
        snapshot, event_id, fingerprint = await _snapshot(job_id)
        if "status" in chosen and (not resumed or event_id > cursor.event):
            cursor.event = max(cursor.event, event_id)
            yield _frame("status", cursor, snapshot)
        cursor.event = max(cursor.event, event_id)
        for kind in ("metric", "log"):
            if kind in chosen:
                async for frames in _stored_after(kind, job_id, cursor):
                    if frames:
                        yield b"".join(frames)
        next_status = next_check = time.monotonic() + STATUS_POLL
        idle_since = fed_at = time.monotonic()
        while True:
            reply = await client.xread({key: feed_position}, count=200,
                                       block=int(STATUS_POLL * 1000))
            frames = []
            for _key, entries in reply or []:
                for entry_id, fields in entries:
                    feed_position = entry_id
                    kind = fields.get("kind")
                    if kind not in chosen:
                        continue
                    fed_at = time.monotonic()
                    # Rows stored before this entry's that the client has not had (the
                    # feed lost their entry): from SQL first, in id order.
                    async for missed in _stored_after(kind, job_id, cursor,
                                                      int(fields.get("prev") or 0)):
                        frames += missed
                    frames.append(_entry_frames(entry_id, kind, fields.get("rows", "[]"),
                                                cursor))
            if chosen & {"metric", "log"} and time.monotonic() >= next_check:
                # A lost entry with none after it (a job's last batch): once the feed has
                # been quiet for a while, SQL says whether anything was stored unsent.
                next_check = time.monotonic() + STATUS_POLL
                if time.monotonic() - fed_at >= STATUS_POLL:
                    newest = await _newest(job_id)
                    for kind in chosen & {"metric", "log"}:
                        async for missed in _stored_after(kind, job_id, cursor, newest[kind]):
                            frames += missed
            if "status" in chosen and time.monotonic() >= next_status:
                next_status = time.monotonic() + STATUS_POLL
                snapshot, event_id, new_fingerprint = await _snapshot(job_id)
                if new_fingerprint != fingerprint:
                    fingerprint = new_fingerprint
                    cursor.event = max(cursor.event, event_id)
                    frames.append(_frame("status", cursor, snapshot))
            if any(frames):
                idle_since = time.monotonic()
                yield b"".join(frames)
            elif time.monotonic() - idle_since >= KEEPALIVE:
                idle_since = time.monotonic()
                yield KEEPALIVE_COMMENT  # keeps proxies from closing a quiet stream
    finally:
        await client.aclose()


@router.get("/stream", response_class=EventSourceResponse)
async def stream_jobs(
    project_id: Annotated[int, Depends(stream_caller)],
    after: Annotated[int | None, Depends(project_resume_point)],
) -> AsyncIterator[ServerSentEvent]:
    """`status` events (data: JobRead) of the project's jobs as their statuses change.
    Without `Last-Event-ID`, the 50 newest jobs come first."""
    cursor = after
    while True:
        changed, cursor = await _sql(project_changes, project_id, cursor)
        for snapshot in changed:
            yield ServerSentEvent(event="status", id=str(cursor), data=snapshot)
        await anyio.sleep(STATUS_POLL)
