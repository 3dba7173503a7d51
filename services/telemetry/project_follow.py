"""Following a project: its jobs' status changes, forever (`GET /api/v1/stream`)."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator

import anyio

from services.telemetry.cursor import Event
from services.telemetry.shared_reads import KEEPALIVE, STATUS_POLL, sql_in_thread
from services.telemetry.stream_state import project_changes


async def follow_project(
    project_id: int, after: int | None = None, *, keepalive: float = KEEPALIVE
) -> AsyncGenerator[list[Event]]:
    """The project's jobs as their statuses change, forever: `status` events whose ids
    are job-event ids. With no `after`, the project's newest jobs come first; an empty
    batch after `keepalive` seconds without any (a quiet spell)."""
    cursor = after
    idle_since = time.monotonic()
    while True:
        changed, cursor = await sql_in_thread(project_changes, project_id, cursor)
        if changed:
            idle_since = time.monotonic()
            yield [Event("status", str(cursor), snapshot) for snapshot in changed]
        elif time.monotonic() - idle_since >= keepalive:
            idle_since = time.monotonic()
            yield []
        await anyio.sleep(STATUS_POLL)
