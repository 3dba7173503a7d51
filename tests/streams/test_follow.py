"""Following a job without HTTP: `follow` against real Redis and PostgreSQL, with the
leader's ingest run by hand. History then live, an exact resume from a cursor, rows whose
feed entry was lost or unreadable, events shared by caught-up followers, keep-alives, and
status events when the job's place in the queue moves."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import aclosing
from typing import Any

import httpx
import pytest
import redis

from services.exceptions import InvalidEventId
from services.telemetry.cursor import Cursor, Event, parse_project_position
from services.telemetry.feed_hub import POOL_SIZE, READER_NAME
from services.telemetry.follow import follow
from services.telemetry.project_follow import follow_project
from services.telemetry.shared_reads import STATUS_POLL
from services.wire.feed import LogRow, MetricRow
from services.wire.keys import live_key
from tests.streams.conftest import ingest_until
from tests.streams.test_sse import emit, emit_logs


class Follower:
    """Runs a follow in a task and collects what it yields."""

    def __init__(self, batches: AsyncIterator[list[Event]]) -> None:
        self.batches: list[list[Event]] = []
        self.task = asyncio.create_task(self._run(batches))

    async def _run(self, batches: AsyncIterator[list[Event]]) -> None:
        async with aclosing(batches) as stream:
            async for batch in stream:
                self.batches.append(batch)

    @property
    def events(self) -> list[Event]:
        return [event for batch in self.batches for event in batch]

    async def wait_for(self, count: int, timeout: float = 15) -> list[Event]:
        """The first `count` events (fails after `timeout` s)."""

        async def enough() -> None:
            while len(self.events) < count:
                if self.task.done():
                    self.task.result()  # the follow's own error, if it had one
                await asyncio.sleep(0.02)

        await asyncio.wait_for(enough(), timeout)
        return self.events[:count]

    async def close(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


def keys(events: list[Event]) -> list[tuple[Any, ...]]:
    return [(e.data.replica, e.data.step, e.data.name) for e in events if e.kind == "metric"]


async def ingest(bus: redis.Redis, expected: int, kind: str = "metric") -> None:
    assert await asyncio.to_thread(ingest_until, bus, expected, kind) == expected


def test_history_then_live_then_an_exact_resume_from_a_cursor(
    bus: redis.Redis, committed: Any
) -> None:
    _, job_id = committed()
    history = emit(bus, job_id, range(1, 6))
    emit_logs(bus, job_id, ["one", "two"], first_seq=1)
    assert ingest_until(bus, 10) == 10 and ingest_until(bus, 2, kind="log") == 2

    async def scenario() -> None:
        follower = Follower(follow(job_id))
        first = await follower.wait_for(13)
        assert first[0].kind == "status" and first[0].data["id"] == job_id
        assert first[0].data["progress"]["step"] == 0 and first[0].data["queue_position"] >= 1
        assert keys(first) == history  # history: the metric points, then the log lines
        assert [(e.kind, e.data.line) for e in first[11:]] == [("log", "one"), ("log", "two")]
        assert all(isinstance(e.data, MetricRow) for e in first[1:11])
        assert all(isinstance(e.data, LogRow) for e in first[11:])
        live = emit(bus, job_id, range(6, 8))
        await ingest(bus, 4)
        assert keys((await follower.wait_for(17))[13:]) == live
        ids = [e.id for e in follower.events]
        assert len(set(ids)) == 17
        await follower.close()

        missed = emit(bus, job_id, range(8, 10))
        emit_logs(bus, job_id, ["three"], first_seq=3)
        await ingest(bus, 4)
        await ingest(bus, 1, kind="log")
        resumed = Follower(follow(job_id, Cursor.parse(ids[-1], "last-event-id")))
        got = await resumed.wait_for(5)
        assert keys(got) == missed  # no status first: the cursor has the job's newest event
        assert got[-1].kind == "log" and got[-1].data.line == "three"
        await asyncio.sleep(0.3)
        assert len(resumed.events) == 5  # and nothing twice
        await resumed.close()

    run(scenario)


def test_rows_of_a_lost_or_unreadable_feed_entry_still_come(
    bus: redis.Redis, committed: Any
) -> None:
    from services.db import session_scope
    from services.telemetry import metrics

    _, job_id = committed()

    async def scenario() -> None:
        follower = Follower(follow(job_id, kinds={"metric"}))
        await asyncio.sleep(0.5)  # caught up: past its (empty) history
        # Stored, but published as nothing this contract writes.
        with session_scope() as session:
            metrics.insert_points(
                session=session,
                rows=[
                    {
                        "job_id": job_id,
                        "attempt": 1,
                        "replica": 0,
                        "step": s,
                        "epoch": 0,
                        "name": "loss",
                        "value": 0.5,
                        "ts": 1.0,
                    }
                    for s in (1, 2)
                ],
            )
        bus.xadd(live_key(job_id), {"kind": "metric", "rows": '[["x"]]', "prev": 0})
        assert keys(await follower.wait_for(2)) == [(0, 1, "loss"), (0, 2, "loss")]
        # Stored with no entry at all, then a later entry names them in `prev`.
        with session_scope() as session:
            metrics.insert_points(
                session=session,
                rows=[
                    {
                        "job_id": job_id,
                        "attempt": 1,
                        "replica": 0,
                        "step": 3,
                        "epoch": 0,
                        "name": "loss",
                        "value": 0.5,
                        "ts": 1.0,
                    }
                ],
            )
        later = emit(bus, job_id, range(4, 5))
        await ingest(bus, 2)
        assert keys((await follower.wait_for(5))[2:]) == [(0, 3, "loss"), *later]
        await follower.close()

    run(scenario)


def test_caught_up_followers_get_the_same_event_objects(bus: redis.Redis, committed: Any) -> None:
    """What lets a transport encode each live event once for all its clients."""
    _, job_id = committed()

    async def scenario() -> None:
        followers = [
            Follower(follow(job_id, kinds=kinds))
            for kinds in ({"metric"}, {"metric", "status"}, {"metric", "log"})
        ]
        await asyncio.sleep(0.5)
        emit(bus, job_id, range(1, 4))
        await ingest(bus, 6)
        with_status = [0, 1, 0]  # the second one's first event is the job's status
        got = [
            [e for e in await f.wait_for(6 + extra) if e.kind == "metric"]
            for f, extra in zip(followers, with_status, strict=True)
        ]
        assert all(e.shared for e in got[0])
        for other in got[1:]:
            assert all(a is b for a, b in zip(got[0], other, strict=True))
        for follower in followers:
            await follower.close()

    run(scenario)


def test_a_quiet_follow_yields_an_empty_batch_for_keep_alives(committed: Any) -> None:
    _, job_id = committed()

    async def scenario() -> None:
        follower = Follower(follow(job_id, kinds={"log"}, keepalive=0.3))
        await asyncio.wait_for(_until(lambda: follower.batches), 10)
        assert follower.batches[0] == []  # no history, nothing live: a keep-alive
        await follower.close()

    run(scenario)


def feed_reader_connections(bus: redis.Redis) -> int:
    """This test worker's connections to Redis from feed readers (by their client name)."""
    db = bus.connection_pool.connection_kwargs.get("db", 0)
    return sum(
        1 for c in bus.client_list() if c.get("name") == READER_NAME and int(c.get("db", -1)) == db
    )


def test_the_followers_of_a_process_share_a_few_redis_connections(
    bus: redis.Redis, committed: Any
) -> None:
    job_ids = [committed()[1] for _ in range(3)]

    async def scenario() -> None:
        followers = [
            Follower(follow(job_id, kinds={"metric"})) for job_id in job_ids for _ in range(10)
        ]
        await asyncio.sleep(0.8)  # all caught up, the reader in XREAD on the three feeds
        assert 1 <= feed_reader_connections(bus) <= POOL_SIZE  # 30 followers
        emit(bus, job_ids[0], range(1, 3))
        emit(bus, job_ids[2], range(1, 2))
        await ingest(bus, 6)
        for index, follower in enumerate(followers):
            expected = {
                0: [(0, 1, "loss"), (0, 1, "accuracy"), (0, 2, "loss"), (0, 2, "accuracy")],
                1: [],
                2: [(0, 1, "loss"), (0, 1, "accuracy")],
            }[index // 10]
            await follower.wait_for(len(expected))
            assert keys(follower.events) == expected
        for follower in followers:
            await follower.close()
        # The last follower gone, the reader stops and closes its connections.
        await asyncio.wait_for(_until(lambda: feed_reader_connections(bus) == 0), 10)

    run(scenario)


def test_a_follow_ends_at_once_when_cancelled_while_waiting_for_its_feed(
    bus: redis.Redis, committed: Any
) -> None:
    _, job_id = committed()

    async def scenario() -> None:
        follower = Follower(follow(job_id, kinds={"log"}, keepalive=60))
        other = Follower(follow(job_id, kinds={"log"}, keepalive=60))
        await asyncio.sleep(0.5)  # past the (empty) history: waiting for the feed
        follower.task.cancel()
        done, _ = await asyncio.wait({follower.task}, timeout=1)
        assert done == {follower.task} and follower.task.cancelled()
        # The other follower of the feed still gets its lines.
        emit_logs(bus, job_id, ["still here"], first_seq=1)
        await ingest(bus, 1, kind="log")
        assert [e.data.line for e in await other.wait_for(1)] == ["still here"]
        await other.close()

    run(scenario)


async def _until(condition: Callable[[], Any]) -> None:
    while not condition():
        await asyncio.sleep(0.02)


def test_a_job_event_when_the_place_in_the_queue_moves(committed: Any) -> None:
    """Not a status change: a `job` event (outside the stream's order, without an id)."""
    from services.db import session_scope
    from services.jobs.transitions import transition_job
    from services.models import Job
    from services.statuses import JobStatus

    _, ahead = committed(project="queue-place")
    _, behind = committed(project="queue-place")

    async def scenario() -> None:
        job = Follower(follow(behind, kinds={"status"}))
        with session_scope() as session:
            project_id = session.get(Job, behind).project_id
        project = Follower(follow_project(project_id))
        first = (await job.wait_for(1))[0].data
        listed = {e.data["id"]: e.data for e in await project.wait_for(2)}
        assert listed[behind]["queue_position"] == first["queue_position"]
        assert listed[ahead]["queue_position"] == first["queue_position"] - 1
        with session_scope() as session:
            transition_job(session=session, job_id=ahead, target=JobStatus.CANCELLED)
        moved_event = (await job.wait_for(2))[1]
        assert moved_event.kind == "job" and moved_event.id is None
        moved = moved_event.data
        assert moved["status"] == "queued"
        assert moved["queue_position"] == first["queue_position"] - 1
        changed = (await project.wait_for(3))[2].data
        assert changed["id"] == ahead and changed["status"] == "cancelled"
        await job.close()
        await project.close()

    run(scenario)


def test_followers_of_many_jobs_share_one_status_read_a_period(
    committed: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The status checks of every job followed in a process are one SQL read per period
    (not one per job), and a job that changes still gets its status event."""
    from services.db import session_scope
    from services.jobs.transitions import transition_job
    from services.statuses import JobStatus
    from services.telemetry import follow as follow_module
    from services.telemetry.stream_state import job_fingerprints, job_snapshot

    # Projects of their own: a cancel moves no other job's place in a queue.
    job_ids = [committed(project=f"many-{i}")[1] for i in range(4)]
    reads: list[list[int]] = []

    def counted(ids: list[int]) -> dict[int, Any]:
        reads.append(sorted(ids))
        return job_fingerprints(ids)

    monkeypatch.setattr(follow_module, "job_fingerprints", counted)

    async def scenario() -> None:
        followers = [Follower(follow(job_id, kinds={"status"})) for job_id in job_ids]
        for follower in followers:
            await follower.wait_for(1)
        # One read answers for all four (a follower whose last ask is more than two
        # periods old, on a loaded machine, may sit one read out: not every read must).
        joined = len(reads)
        await asyncio.wait_for(
            _until(lambda: any(ids == sorted(job_ids) for ids in reads[joined:])), 60
        )
        # And the reads come once a period, not once per job a period (four a period):
        # two more reads take at least a period (a slow machine only makes it longer).
        counted_from, since = len(reads), time.monotonic()
        await asyncio.wait_for(_until(lambda: len(reads) >= counted_from + 2), 60)
        assert time.monotonic() - since >= 0.9 * STATUS_POLL
        with session_scope() as session:
            transition_job(session=session, job_id=job_ids[2], target=JobStatus.CANCELLED)
        changed = (await followers[2].wait_for(2))[1].data
        assert changed["status"] == "cancelled"
        assert all(len(f.events) == 1 for i, f in enumerate(followers) if i != 2)
        for follower in followers:
            await follower.close()

    run(scenario)
    # (A read of the four of them at a time, not a status poll each: asserted above.)
    # The batched fingerprint is the one the snapshot gives.
    for job_id in job_ids:
        assert job_fingerprints([job_id])[job_id] == job_snapshot(job_id)[2]
    assert job_fingerprints([10**9]) == {10**9: ()}


@pytest.mark.parametrize(
    "raw", ["nope", "1.2", "1.2.3.4", "1.-2.3", "1.2.²", "1.2." + "9" * 19, "", " . . "]
)
def test_a_cursor_is_three_ids_this_stream_sent(raw: str) -> None:
    with pytest.raises(InvalidEventId) as refused:
        Cursor.parse(raw, "last-event-id")
    assert refused.value.field == "last-event-id" and "omit it" in str(refused.value)
    assert Cursor.parse(" 12.0.7 ", "x") == Cursor(12, 0, 7)


@pytest.mark.parametrize("raw", ["nope", "1.2", "-1", "²", "9" * 19, ""])
def test_a_project_stream_position_is_one_job_event_id(raw: str) -> None:
    with pytest.raises(InvalidEventId):
        parse_project_position(raw)
    assert parse_project_position(" 42") == 42 and parse_project_position(None) is None


def test_a_bad_resume_point_is_a_422_naming_where_it_came_from(
    live_api: str, committed: Any
) -> None:
    token, job_id = committed()
    auth = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=live_api, timeout=15) as http:
        url = f"/api/v1/jobs/{job_id}/stream"
        bad = http.get(url, params={"last_event_id": "1.2.²"}, headers=auth)
        assert bad.status_code == 422
        assert bad.json()["fields"] == [
            {
                "field": "last_event_id",
                "message": (
                    "'1.2.²' is not an event id of this stream (three numbers joined by dots); "
                    "omit it to start from the beginning"
                ),
            }
        ]
        project = http.get("/api/v1/stream", headers={**auth, "Last-Event-ID": "x"})
        assert project.status_code == 422 and "last-event-id" in project.json()["message"]


def test_a_follow_of_a_job_finished_before_it_began_ends_without_a_poll(
    bus: redis.Redis, committed: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A finished job's stream opened (the dashboard, `cohort job follow`, a test waiting
    # for its job): settled already, it ends at once, not after a first STATUS_POLL of
    # waiting (it used to take a second). With the poll made a minute, the follow must
    # end well within it.
    # The job was cancelled in the queue: no replica ever shipped anything, so it does not
    # wait for the leader's ingest either, here behind by another job's point (it held
    # this follow for SETTLE_LIMIT when another test left one on the worker's Redis).
    from services.db import session_scope
    from services.jobs import store as jobs
    from services.models import Job
    from services.telemetry import follow as follow_module
    from services.wire.keys import LEADER_GROUP, METRICS_STREAM

    bus.xgroup_create(METRICS_STREAM, LEADER_GROUP, id="$", mkstream=True)
    bus.xadd(METRICS_STREAM, {"kind": "metric"})  # never delivered: no ingest runs here
    _, job_id = committed()
    with session_scope() as session:
        jobs.request_cancel(session=session, job=session.get(Job, job_id))
    monkeypatch.setattr(follow_module, "STATUS_POLL", 60.0)

    async def scenario() -> None:
        statuses: list[str] = []

        async def drain() -> None:
            async with aclosing(follow(job_id, kinds={"status"})) as batches:
                async for batch in batches:
                    statuses.extend(e.data["status"] for e in batch if e.kind == "status")

        await asyncio.wait_for(drain(), 20)
        assert statuses[-1] == "cancelled", statuses

    run(scenario)
