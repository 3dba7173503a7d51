"""The SQL reads a process's followers share (services/telemetry/follow.py and
project_follow.py): each runs once per STATUS_POLL s, in a thread, whatever the number of
followers asking; and the pace of a follow."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, TypeVar

import anyio

STATUS_POLL = 1.0  # seconds between status checks (statuses change rarely)
KEEPALIVE = 15.0  # seconds of silence before an empty batch (a transport's keep-alive)
T = TypeVar("T")


async def sql_in_thread(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in a worker thread: sync SQLAlchemy off the event loop (short reads only)."""
    return await anyio.to_thread.run_sync(fn, *args)


class PerJob:
    """One SQL read per job per STATUS_POLL s, shared by every follower in this process:
    100 followers of one job cost one read a second, not 100."""

    def __init__(self, read: Callable[[int], Any]) -> None:
        self.read = read
        self.values: dict[int, tuple[float, Any]] = {}

    async def __call__(self, job_id: int) -> Any:
        now = time.monotonic()
        hit = self.values.get(job_id)
        if hit is not None and now - hit[0] < STATUS_POLL:
            return hit[1]
        value = await sql_in_thread(self.read, job_id)
        if len(self.values) > 10_000:
            self.values.clear()
        self.values[job_id] = (now, value)
        return value


class EveryJob:
    """One SQL read per STATUS_POLL s for every job followed in this process (`read`
    takes the jobs' ids and answers for each): 100 jobs followed cost one read a second,
    not 100. A job is read while it was asked for in the last two periods."""

    def __init__(self, read: Callable[[list[int]], dict[int, Any]]) -> None:
        self.read = read
        self.values: dict[int, Any] = {}
        self.asked: dict[int, float] = {}
        self.read_at = float("-inf")
        self.reading: asyncio.Task[None] | None = None

    async def __call__(self, job_id: int) -> Any:
        asked = self.asked[job_id] = time.monotonic()
        # Fresh enough: a read that started at most STATUS_POLL s before this call, or
        # after it however long it took. (Measured from now instead, a read slower than
        # STATUS_POLL, as on a loaded database, was stale on arrival: read followed read
        # and the follower's stream stalled for as long as reads were that slow.)
        while job_id not in self.values or self.read_at < asked - STATUS_POLL:
            if self.reading is None:
                self.reading = asyncio.get_running_loop().create_task(self._read())
            # A value at most a period older than that serves while the next is read: a
            # follower asks with the feed's events in hand, and waiting made every
            # follower that asked during a read hold its events for as long as the read
            # took (tens to hundreds of ms on a loaded database: emit -> SSE's tail).
            if job_id in self.values and self.read_at >= asked - 2 * STATUS_POLL:
                break
            # Shielded: a follower that leaves does not cancel the others' read.
            await asyncio.shield(self.reading)
        return self.values[job_id]

    async def _read(self) -> None:
        try:
            started = time.monotonic()
            self.asked = {
                job: at for job, at in self.asked.items() if at >= started - 2 * STATUS_POLL
            }
            self.values = await sql_in_thread(self.read, list(self.asked))
            self.read_at = started
        finally:
            self.reading = None
