"""Live streams (Server-Sent Events): one job's status, metrics and logs; the project's jobs.

`GET /jobs/{id}/stream` sends `status` (data: JobRead with the change), `metric` and `log`
events in the one order they were stored, each with the cursor after it as its id: a
client that reconnects with `Last-Event-ID` gets exactly the events after it, in that
order. The terminal status is the last event; the response ends after it. `job` events
(no id) say the job's place in the queue or its replicas changed. What to send, and when,
is services/telemetry/follow.py's; these routes parse the request and frame what it yields.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from functools import lru_cache
from typing import Annotated

import anyio
import orjson
from fastapi import APIRouter, Depends, Header, Query, Response
from fastapi.exceptions import RequestValidationError
from fastapi.sse import KEEPALIVE_COMMENT, EventSourceResponse, ServerSentEvent

from api.deps import (
    SettingsDep,
    StreamCredential,
    StreamCredentialDep,
    StreamScopeRule,
    StreamTokenDep,
    scoped,
)
from api.openapi import errors
from api.params import DbId, shown
from api.stream_limits import SLOTS
from services.auth.scopes import Scope
from services.db import session_scope
from services.jobs import store as jobs
from services.telemetry.cursor import Cursor, Event, parse_project_position
from services.telemetry.follow import KINDS, follow, stream_over
from services.telemetry.project_follow import follow_project

# Streams read the token in a short session of their own (api/deps.get_stream_token),
# and again every REAUTH_SECONDS while they last.
REAUTH_SECONDS = 5.0
router = APIRouter(tags=["streams"], dependencies=scoped(write=Scope.SUBMIT, rule=StreamScopeRule))

# The ids the streams send (services/telemetry/cursor.py): `<metric>.<log>.<event>`, and a
# job-event id for the project's stream.
JOB_EVENT_ID = r"^[0-9]{1,18}\.[0-9]{1,18}\.[0-9]{1,18}$"
PROJECT_EVENT_ID = r"^[0-9]{1,18}$"


def chosen_kinds(
    kinds: Annotated[list[str] | None, Query(max_length=8)] = None,
) -> set[str]:
    """The `kinds` query: some of status, metric, log (all when absent)."""
    chosen = set(kinds or KINDS)
    unknown = chosen - set(KINDS)
    if unknown:
        raise RequestValidationError(
            [
                {
                    "loc": ("query", "kinds"),
                    "type": "value_error",
                    "msg": f"unknown kind {sorted(unknown)[0]!r}; use status, metric or log",
                }
            ]
        )
    return chosen


def resume_point(
    last_event_id: Annotated[str | None, Header(json_schema_extra=shown(JOB_EVENT_ID))] = None,
    resume: Annotated[
        str | None, Query(alias="last_event_id", json_schema_extra=shown(JOB_EVENT_ID))
    ] = None,
) -> Cursor | None:
    """Where a reconnecting client left off: `Last-Event-ID`, or `?last_event_id=`."""
    # A dependency, so a bad id is a 422 before the stream starts.
    if last_event_id:
        return Cursor.parse(last_event_id, "last-event-id")
    if resume:
        return Cursor.parse(resume, "last_event_id")
    return None


def project_resume_point(
    last_event_id: Annotated[str | None, Header(json_schema_extra=shown(PROJECT_EVENT_ID))] = None,
    resume: Annotated[
        str | None, Query(alias="last_event_id", json_schema_extra=shown(PROJECT_EVENT_ID))
    ] = None,
) -> int | None:
    """Where a project stream client left off: a job-event id."""
    return parse_project_position(last_event_id or resume)


async def stream_slot(token: StreamTokenDep, settings: SettingsDep) -> AsyncIterator[None]:
    """One of the token's open streams, for as long as the response lasts (429 past
    COHORT_MAX_STREAMS_PER_TOKEN)."""
    # A dependency with yield: what follows it runs once the response has ended, whether
    # its client left or the server stopped.
    SLOTS.take(token.id, settings.MAX_STREAMS_PER_TOKEN)
    try:
        yield
    finally:
        SLOTS.give_back(token.id)


def stream_job_id(job_id: DbId, token: StreamTokenDep) -> int:
    """The job in the path if the caller's project owns it (404 otherwise)."""
    with session_scope() as session:
        return jobs.read_job(session=session, project_id=token.project_id, job_id=job_id).id


# The token holds COHORT_MAX_STREAMS_PER_TOKEN open streams already (Retry-After says when
# to try again).
TOO_MANY = errors(429)


def _encode(event: Event) -> bytes:
    """The event as SSE (what `format_sse_event` writes), formatted directly: half its
    cost, and at 50,000 points a second every event of every client comes here. orjson
    writes no line break (it escapes them), and kinds and ids have none, so each field
    is one line."""
    data = event.data if isinstance(event.data, dict) else event.data.payload()
    if event.id is None:
        return b"event: %s\ndata: %s\n\n" % (event.kind.encode(), orjson.dumps(data))
    return b"event: %s\ndata: %s\nid: %s\n\n" % (
        event.kind.encode(),
        orjson.dumps(data),
        event.id.encode(),
    )


# Every caught-up client of a job gets the same event objects from `follow` (`shared`):
# encoded once for all the clients of this process.
_encode_shared = lru_cache(maxsize=40_000)(_encode)


async def _while_valid(
    batches: AsyncGenerator[list[Event]], credential: StreamCredential
) -> AsyncIterator[list[Event]]:
    """`batches` for as long as the caller's credential lets a request in, asked again
    every REAUTH_SECONDS at the next batch (a quiet stream has an empty one every
    KEEPALIVE seconds): revoking a token, or logging out, ends its open streams too."""
    checked = time.monotonic()
    async with aclosing(batches):
        async for events in batches:
            if time.monotonic() - checked >= REAUTH_SECONDS:
                valid = credential.recent_answer()  # a thread only to ask the database
                if valid is None:
                    valid = await anyio.to_thread.run_sync(credential.still_valid)
                if not valid:
                    return
                checked = time.monotonic()
            yield events


async def _frames(batches: AsyncIterator[list[Event]]) -> AsyncIterator[bytes]:
    # Events are written a batch at a time (one feed entry, one history page): one write
    # per event would cap a process at a few thousand events a second across all clients.
    async for events in batches:
        # An empty batch is a quiet spell: a comment keeps proxies from closing the stream.
        yield (
            b"".join([_encode_shared(e) if e.shared else _encode(e) for e in events])
            if events
            else KEEPALIVE_COMMENT
        )


@router.get(
    "/jobs/{job_id}/stream",
    dependencies=[Depends(stream_slot)],
    responses={
        200: {
            "content": {"text/event-stream": {}},
            "description": "`status`, `metric` and `log` events",
        },
        204: {
            "description": "`Last-Event-ID` is the job's terminal status: "
            "the stream is over (SSE clients stop "
            "reconnecting on a 204)"
        },
        **TOO_MANY,
    },
)
async def stream_job(
    job_id: Annotated[int, Depends(stream_job_id)],
    start: Annotated[Cursor | None, Depends(resume_point)],
    chosen: Annotated[set[str], Depends(chosen_kinds)],
    credential: StreamCredentialDep,
) -> Response:
    """A job's `status`, `metric` and `log` events in the order they were stored, history
    then live; the terminal status comes last, after every point and line, and ends the
    response. Reconnect with `Last-Event-ID` (or `?last_event_id=`) to get exactly the
    events after it; `kinds` picks some of the three (e.g. `kinds=log` to follow logs)."""
    if (
        start is not None
        and "status" in chosen
        and await anyio.to_thread.run_sync(stream_over, job_id, start)
    ):
        return Response(status_code=204)
    return EventSourceResponse(
        _frames(_while_valid(follow(job_id, start, chosen), credential)),
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.get(
    "/stream",
    response_class=EventSourceResponse,
    dependencies=[Depends(stream_slot)],
    responses=TOO_MANY,
)
async def stream_jobs(
    token: StreamTokenDep,
    after: Annotated[int | None, Depends(project_resume_point)],
    credential: StreamCredentialDep,
) -> AsyncIterator[ServerSentEvent]:
    """`status` events (data: JobRead) of the project's jobs as their statuses change.
    Without `Last-Event-ID`, the 50 newest jobs come first."""
    async for events in _while_valid(follow_project(token.project_id, after), credential):
        for event in events:
            yield ServerSentEvent(event=event.kind, id=event.id, data=event.data)
