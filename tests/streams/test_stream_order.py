"""A job's stream is one order, history and live alike: clients that drop the connection
at random points (seeded) and come back with Last-Event-ID reassemble exactly what a
client that never left was sent, while the job runs (points, lines and status changes
being stored meanwhile, by the leader's real ingest in its two threads) and after it
ended; every status change is an event; the terminal status is the last event, after the
points and lines the ingest stored after the exit was applied, and the stream ends.

Real PostgreSQL and Redis, the api served by uvicorn in process (as test_sse.py)."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
import redis

from cohort.sse import Event, parse_lines
from services.statuses import JobStatus
from tests.e2e.conftest import wait_for
from tests.streams.test_sse import emit, emit_logs

Signature = tuple[Any, ...]


class Ingest:
    """The leader's ingest, as the scheduler runs it: one thread per feed, until stopped;
    `paused` holds both (the exit applied before the last rows are stored)."""

    def __init__(self, client: redis.Redis) -> None:
        from workers.control.ingest import LOGS, METRICS, ingest_once

        self.stop, self.running = threading.Event(), threading.Event()
        self.running.set()
        self.stored = {"metric": 0, "log": 0}
        self.threads = [
            threading.Thread(target=self._loop, args=(client, feed, ingest_once), daemon=True)
            for feed in (METRICS, LOGS)
        ]

    def _loop(self, client: redis.Redis, feed: Any, once: Any) -> None:
        from services.db import session_scope

        while not self.stop.is_set():
            if not self.running.wait(0.05):
                continue
            self.stored[feed.kind] += once(client, feed, sessions=session_scope, block_ms=50)

    def __enter__(self) -> Ingest:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(10)


def transition(job_id: int, target: JobStatus) -> None:
    from services.db import session_scope
    from services.jobs.transitions import transition_job

    with session_scope() as session:
        transition_job(session=session, job_id=job_id, target=target, reason=f"to {target}")


def signature(event: Event) -> Signature:
    """What a client must get identically: kind, id, and the stored item."""
    if event.event == "status":
        return event.event, event.id, event.data["change"]["id"], event.data["status"]
    return event.event, event.id, tuple(sorted(event.data.items()))


@contextmanager
def connection(
    base: str, job_id: int, token: str, last_id: str | None
) -> Iterator[Iterator[Event]]:
    """The stream's events from `last_id`; none when it answers 204 (the client has had
    the terminal status)."""
    headers = {"Authorization": f"Bearer {token}"}
    if last_id:
        headers["Last-Event-ID"] = last_id
    with (
        httpx.Client(base_url=base, timeout=httpx.Timeout(10.0, read=90.0)) as http,
        http.stream("GET", f"/api/v1/jobs/{job_id}/stream", headers=headers) as response,
    ):
        assert response.status_code in (200, 204)
        yield parse_lines(response.iter_lines()) if response.status_code == 200 else iter(())


class Client(threading.Thread):
    """Reads the job's stream to its end; with a seed, drops the connection after a
    random number of events (1 to 8) each time and resumes with Last-Event-ID."""

    def __init__(self, base: str, job_id: int, token: str, seed: int | None = None) -> None:
        super().__init__(daemon=True)
        self.base, self.job_id, self.token = base, job_id, token
        self.random = None if seed is None else random.Random(seed)
        self.got: list[Signature] = []
        self.connections = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._read()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            self.error = exc

    def _read(self) -> None:
        last_id: str | None = None
        while True:
            self.connections += 1
            quota = self.random.randint(1, 8) if self.random else None
            ended = True
            with connection(self.base, self.job_id, self.token, last_id) as events:
                for event in events:
                    if event.event == "job":  # outside the order (it carries no id)
                        continue
                    self.got.append(signature(event))
                    last_id = event.id
                    if quota is not None:
                        quota -= 1
                        if quota == 0:
                            ended = False
                            break
            if ended:
                return

    def result(self, timeout: float = 120) -> list[Signature]:
        self.join(timeout)
        assert not self.is_alive(), "the stream did not end"
        if self.error is not None:
            raise self.error
        return self.got


def run_job(bus: redis.Redis, job_id: int, ingest: Ingest, seed: int) -> tuple[int, int]:
    """Drive a job through scheduled, running, succeeded while its replica reports points
    and lines at random moments; the last ones are stored after the exit was applied.
    Returns the points and lines emitted."""
    rnd = random.Random(seed)
    points = lines = 0
    step = seq = 1
    actions = ["metric"] * 14 + ["log"] * 10
    rnd.shuffle(actions)
    actions.insert(rnd.randint(0, 4), "scheduled")
    actions.insert(rnd.randint(6, 12), "running")
    for action in actions:
        if action == "metric":
            n = rnd.randint(1, 4)
            points += len(emit(bus, job_id, range(step, step + n)))
            step += n
        elif action == "log":
            n = rnd.randint(1, 3)
            emit_logs(bus, job_id, [f"line {seq + i}" for i in range(n)], first_seq=seq)
            seq, lines = seq + n, lines + n
        else:
            transition(job_id, JobStatus(action))
        time.sleep(rnd.uniform(0, 0.15))
    # The replica's last points and lines are shipped before its exit is reported, but
    # the ingest stores them after the job's status turned terminal.
    ingest.running.clear()
    time.sleep(0.2)
    points += len(emit(bus, job_id, range(step, step + 3)))
    emit_logs(bus, job_id, ["last line"], first_seq=seq)
    lines += 1
    transition(job_id, JobStatus.SUCCEEDED)
    time.sleep(1.5)  # the followers see the terminal status while the rows wait
    ingest.running.set()
    return points, lines


@pytest.mark.parametrize("seed", [1, 2])
def test_clients_that_drop_at_random_points_reassemble_the_uninterrupted_stream(
    live_api: str, bus: redis.Redis, committed: Any, seed: int
) -> None:
    token, job_id = committed()
    with Ingest(bus) as ingest:
        live = [Client(live_api, job_id, token)] + [
            Client(live_api, job_id, token, seed=seed * 100 + i) for i in range(2)
        ]
        for client in live:
            client.start()
        points, lines = run_job(bus, job_id, ingest, seed)
        whole = live[0].result()
        for client in live[1:]:
            assert client.result() == whole
            assert client.connections >= 3
        # The job has ended: the stream is history alone, in the same order.
        after = [Client(live_api, job_id, token)] + [
            Client(live_api, job_id, token, seed=seed * 100 + 50 + i) for i in range(2)
        ]
        for client in after:
            client.start()
        for client in after:
            assert client.result() == whole
    kinds = [s[0] for s in whole]
    assert kinds.count("metric") == points and kinds.count("log") == lines
    assert len({s[1] for s in whole}) == len(whole)  # every id once
    statuses = [s[3] for s in whole if s[0] == "status"]
    assert statuses == ["queued", "scheduled", "running", "succeeded"]
    assert whole[-1][0] == "status" and whole[-1][3] == "succeeded"
    assert [s for s in whole if s[0] == "log"][-1][2] == tuple(
        sorted({"attempt": 1, "replica": 0, "ts": 2000.0, "line": "last line"}.items())
    )


def test_every_status_change_is_an_event_even_between_two_polls(
    live_api: str, committed: Any
) -> None:
    """`scheduled` and `running` stored within one status poll, while no client was
    connected: a client resuming after `queued` gets both, in order."""
    token, job_id = committed()
    with connection(live_api, job_id, token, None) as events:
        first = next(events)
    assert first.event == "status" and first.data["status"] == "queued"
    transition(job_id, JobStatus.SCHEDULED)
    transition(job_id, JobStatus.RUNNING)
    with connection(live_api, job_id, token, first.id) as events:
        got = [next(events), next(events)]
    assert [(e.event, e.data["status"]) for e in got] == [
        ("status", "scheduled"),
        ("status", "running"),
    ]
    assert [e.data["change"]["from_status"] for e in got] == ["queued", "scheduled"]
    # ...and so does a client that stays connected while they happen.
    transition(job_id, JobStatus.RESTARTING)
    transition(job_id, JobStatus.QUEUED)
    with connection(live_api, job_id, token, got[-1].id) as events:
        again = [next(events), next(events)]
        transition(job_id, JobStatus.SCHEDULED)
        transition(job_id, JobStatus.RUNNING)
        live = [next(events), next(events)]
    assert [e.data["status"] for e in again + live] == [
        "restarting",
        "queued",
        "scheduled",
        "running",
    ]
    assert live[-1].data["attempt"] == 2


def test_the_terminal_status_comes_after_the_last_rows_and_ends_the_stream(
    live_api: str, bus: redis.Redis, committed: Any
) -> None:
    token, job_id = committed()
    transition(job_id, JobStatus.SCHEDULED)
    transition(job_id, JobStatus.RUNNING)
    # The replica's last points and line reach Redis before its exit is applied; the
    # ingest is slow: it stores them after the job succeeded.
    emit(bus, job_id, range(1, 3))
    emit_logs(bus, job_id, ["bye"], first_seq=1)
    transition(job_id, JobStatus.SUCCEEDED)
    got: list[Event] = []

    def read() -> None:
        with connection(live_api, job_id, token, None) as events:
            for event in events:
                if event.event != "job":
                    got.append(event)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    wait_for(lambda: len(got) >= 3, 15, "the statuses before the terminal one")
    time.sleep(1.5)  # the stream holds the terminal status while the rows are unstored
    assert [e.data["status"] for e in got] == ["queued", "scheduled", "running"]
    with Ingest(bus):
        reader.join(30)
    assert not reader.is_alive(), "the stream did not end after the terminal status"
    # The two feeds' commits may come in either order: the rows, then the terminal status.
    assert [e.event for e in got[:3]] == ["status"] * 3 and got[-1].event == "status"
    assert sorted(e.event for e in got[3:-1]) == ["log"] + ["metric"] * 4
    assert got[-1].data["status"] == "succeeded" and got[-1].data["change"]["reason"]
    # Resuming with the terminal status's id: the stream is over (204: SSE clients stop
    # reconnecting).
    with httpx.Client(base_url=live_api, timeout=10) as http:
        over = http.get(
            f"/api/v1/jobs/{job_id}/stream",
            headers={"Authorization": f"Bearer {token}", "Last-Event-ID": got[-1].id},
        )
    assert over.status_code == 204 and over.content == b""
    # Resuming before it: the rest, in the same order.
    again = [e for e in _whole(live_api, job_id, token, got[4].id) if e.event != "job"]
    assert [signature(e) for e in again] == [signature(e) for e in got[5:]]


def _whole(base: str, job_id: int, token: str, last_id: str | None = None) -> list[Event]:
    with connection(base, job_id, token, last_id) as events:
        return list(events)
