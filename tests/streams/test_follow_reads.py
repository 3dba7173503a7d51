"""The SQL reads a process's followers share: a quiet feed's check for rows stored with no
entry after them (services/telemetry/follow.py `unfed`) is one read a period for every
job followed, not one per job (1000 streams over 50 jobs spent most of the api's CPU on
these reads), and still finds such rows."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from services.telemetry.follow import follow
from services.telemetry.shared_reads import STATUS_POLL
from tests.streams.test_follow import Follower, keys, run


async def _until(done: Any) -> None:
    while not done():
        await asyncio.sleep(0.02)


def _store_unpublished(job_id: int, step: int) -> None:
    """A point stored with no feed entry at all (a publish lost after its commit)."""
    from services.db import session_scope
    from services.telemetry import metrics

    row = {"job_id": job_id, "attempt": 1, "replica": 0, "step": step, "epoch": 0}
    with session_scope() as session:
        metrics.insert_points(
            session=session, rows=[{**row, "name": "loss", "value": 0.5, "ts": 1.0}]
        )


@pytest.mark.usefixtures("bus")
def test_quiet_feeds_of_many_jobs_share_one_newest_rows_read_a_period(
    committed: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from services.telemetry import follow as follow_module
    from services.telemetry.stream_state import jobs_newest_ids

    job_ids = [committed(project=f"quiet-{i}")[1] for i in range(4)]
    reads: list[list[int]] = []

    def counted(ids: list[int]) -> dict[int, dict[str, int]]:
        reads.append(sorted(ids))
        return jobs_newest_ids(ids)

    monkeypatch.setattr(follow_module, "jobs_newest_ids", counted)

    async def scenario() -> None:
        followers = [Follower(follow(job_id, kinds={"metric"})) for job_id in job_ids]
        # One read answers for all four quiet feeds.
        await asyncio.wait_for(_until(lambda: sorted(job_ids) in reads), 60)
        # Once a period, not once per job a period: two more reads take a period at least.
        counted_from, since = len(reads), time.monotonic()
        await asyncio.wait_for(_until(lambda: len(reads) >= counted_from + 2), 60)
        assert time.monotonic() - since >= 0.9 * STATUS_POLL
        # A row stored with no entry after it still comes, to its job's follower alone.
        _store_unpublished(job_ids[1], step=7)
        assert keys(await followers[1].wait_for(1, timeout=30)) == [(0, 7, "loss")]
        assert all(not f.events for i, f in enumerate(followers) if i != 1)
        for follower in followers:
            await follower.close()

    run(scenario)
    assert jobs_newest_ids([10**9]) == {10**9: {"metric": 0, "log": 0}}


def test_a_shared_read_in_flight_holds_no_follower_back_that_has_the_last_value() -> None:
    """A follower asks with the feed's events in hand: while the next read runs, the last
    one (at most a period older than due) answers at once instead of holding them."""
    from services.telemetry.shared_reads import EveryJob

    reads: list[list[int]] = []
    slow = threading.Event()

    def read(ids: list[int]) -> dict[int, int]:
        reads.append(ids)
        if len(reads) > 1:
            slow.wait(10)  # a loaded database
        return dict.fromkeys(ids, len(reads))

    async def scenario() -> None:
        every = EveryJob(read)
        assert await every(1) == 1
        await asyncio.sleep(1.1 * STATUS_POLL)  # a new read is due
        assert await asyncio.wait_for(every(1), 0.5 * STATUS_POLL) == 1
        await asyncio.wait_for(_until(lambda: len(reads) == 2), 5)  # and it runs meanwhile
        slow.set()
        await asyncio.wait_for(_until(lambda: every.reading is None), 10)
        assert await every(1) == 2

    run(scenario)
