"""The SSE stream of a job against a real api server, real Redis and PostgreSQL:
history then live, and an exact resume with Last-Event-ID after a dropped connection."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import redis

from cohort.sse import Event, parse_lines
from tests.streams.conftest import ingest_until, ship_points


def emit(client: redis.Redis, job_id: int, steps: range, replica: int = 0) -> list[tuple]:
    """Append one metric batch as a replica would; returns the points' keys."""
    points = [[s, 0, name, s / 10, 1000.0 + s] for s in steps for name in ("loss", "accuracy")]
    ship_points(client, job_id, points, replica=replica)
    return [(replica, s, name) for s, _, name, _, _ in points]


def emit_logs(client: redis.Redis, job_id: int, lines: list[str], first_seq: int) -> None:
    client.xadd(
        "cohort:logs",
        {
            "data": json.dumps(
                {
                    "job_id": job_id,
                    "attempt": 1,
                    "replica": 0,
                    "lines": [[first_seq + i, 2000.0 + i, line] for i, line in enumerate(lines)],
                }
            )
        },
    )


def take(events: Iterator[Event], n: int) -> list[Event]:
    """The next `n` events; a read that times out says how far the stream had come (the
    client's timeout: no byte for that long)."""
    got: list[Event] = []
    try:
        while len(got) < n:
            got.append(next(events))
    except httpx.ReadTimeout as exc:
        last = got[-1].data if got else None
        raise AssertionError(f"{len(got)} of {n} events, then no byte; the last: {last}") from exc
    return got


def keys(events: list[Event]) -> list[tuple[Any, ...]]:
    return [
        (e.data["replica"], e.data["step"], e.data["name"]) for e in events if e.event == "metric"
    ]


def test_history_then_live_then_exact_resume(
    live_api: str, bus: redis.Redis, committed: Any
) -> None:
    token, job_id = committed()
    headers = {"Authorization": f"Bearer {token}"}
    url = f"{live_api}/api/v1/jobs/{job_id}/stream"
    history = emit(bus, job_id, range(1, 11)) + emit(bus, job_id, range(1, 6), replica=1)
    assert ingest_until(bus, 30) == 30

    with httpx.Client(timeout=15) as http, http.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = parse_lines(response.iter_lines())
        first = take(events, 31)
        assert first[0].event == "status" and first[0].data["id"] == job_id
        assert first[0].data["status"] == "queued" and "progress" in first[0].data
        assert sorted(keys(first)) == sorted(history)  # a late client gets history first
        assert first[1].data == {
            "attempt": 1,
            "replica": 0,
            "step": 1,
            "epoch": 0,
            "name": "loss",
            "value": 0.1,
            "ts": 1001.0,
        }
        live = emit(bus, job_id, range(11, 14))
        assert ingest_until(bus, 6) == 6
        seen = take(events, 6)  # then live events
        assert keys(seen) == live
        last_id = seen[-1].id
    # The connection dropped; meanwhile more is stored, some of it a redelivery.
    missed = emit(bus, job_id, range(14, 20))
    emit(bus, job_id, range(11, 14))  # duplicates: stored once, never streamed twice
    emit_logs(bus, job_id, ["epoch 1", "epoch 2"], first_seq=1)
    assert ingest_until(bus, 12) == 12
    assert ingest_until(bus, 2, kind="log") == 2

    resume = {**headers, "Last-Event-ID": last_id}
    with httpx.Client(timeout=15) as http, http.stream("GET", url, headers=resume) as response:
        events = parse_lines(response.iter_lines())
        got = take(events, 14)
        assert keys(got) == missed  # exactly what was missed, in order, no status repeat
        assert [(e.event, e.data["line"]) for e in got[12:]] == [
            ("log", "epoch 1"),
            ("log", "epoch 2"),
        ]
        assert len({e.id for e in got}) == 14
        after = emit(bus, job_id, range(20, 21))
        assert ingest_until(bus, 2) == 2
        assert keys(take(events, 2)) == after  # and the stream goes on live


def test_logs_only_and_bad_resume_ids(live_api: str, bus: redis.Redis, committed: Any) -> None:
    token, job_id = committed()
    headers = {"Authorization": f"Bearer {token}"}
    emit(bus, job_id, range(1, 3))
    emit_logs(bus, job_id, ["hello", "world"], first_seq=1)
    ingest_until(bus, 4)
    ingest_until(bus, 2, kind="log")
    url = f"{live_api}/api/v1/jobs/{job_id}/stream"
    with httpx.Client(timeout=15) as http:
        with http.stream("GET", url, params={"kinds": "log"}, headers=headers) as response:
            got = take(parse_lines(response.iter_lines()), 2)
            assert [(e.event, e.data["line"]) for e in got] == [("log", "hello"), ("log", "world")]
        bad = http.get(url, headers={**headers, "Last-Event-ID": "nope"})
        assert bad.status_code == 422 and "last-event-id" in bad.json()["message"]
        assert http.get(url, params={"kinds": "video"}, headers=headers).status_code == 422
        other_token, _ = committed(project="other")
        assert http.get(url, headers={"Authorization": f"Bearer {other_token}"}).status_code == 404
        assert http.get(url).status_code == 401


def test_project_stream_sends_status_changes(live_api: str, committed: Any) -> None:
    from services.db import session_scope
    from services.jobs.transitions import transition_job
    from services.statuses import JobStatus

    token, job_id = committed(project="proj-stream")
    headers = {"Authorization": f"Bearer {token}"}
    with (
        httpx.Client(timeout=15) as http,
        http.stream("GET", f"{live_api}/api/v1/stream", headers=headers) as response,
    ):
        events = parse_lines(response.iter_lines())
        first = next(events)
        assert first.event == "status" and first.data["id"] == job_id
        with session_scope() as session:
            transition_job(
                session=session, job_id=job_id, target=JobStatus.CANCELLED, reason="test"
            )
        changed = next(events)
        assert changed.data["id"] == job_id and changed.data["status"] == "cancelled"
        assert int(changed.id) > int(first.id)


def test_cli_logs_follow_prints_tail_then_live_lines_until_the_end(
    live_api: str, bus: redis.Redis, committed: Any
) -> None:
    import os
    import subprocess
    import sys

    from services.db import session_scope
    from services.jobs.transitions import transition_job
    from services.statuses import JobStatus

    token, job_id = committed()
    emit_logs(bus, job_id, ["one", "two", "three"], first_seq=1)
    assert ingest_until(bus, 3, kind="log") == 3
    env = {**os.environ, "COHORT_URL": live_api, "COHORT_TOKEN": token}
    follower = subprocess.Popen(
        [sys.executable, "-m", "cli", "logs", str(job_id), "--tail", "2", "-f", "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = [json.loads(follower.stdout.readline())["line"] for _ in range(2)]
        assert first == ["two", "three"]
        emit_logs(bus, job_id, ["four"], first_seq=4)
        assert ingest_until(bus, 1, kind="log") == 1
        assert json.loads(follower.stdout.readline())["line"] == "four"
        with session_scope() as session:
            transition_job(session=session, job_id=job_id, target=JobStatus.CANCELLED)
        assert follower.wait(timeout=30) == 0  # the job ended: so does the follower
        assert follower.stdout.read() == ""
    finally:
        follower.kill()


def test_a_stalled_client_holds_up_neither_the_ingest_nor_a_reading_client(
    live_api: str, bus: redis.Redis, committed: Any
) -> None:
    import socket
    from urllib.parse import urlsplit

    token, job_id = committed()
    headers = {"Authorization": f"Bearer {token}"}
    path = f"/api/v1/jobs/{job_id}/stream"
    where = urlsplit(live_api)
    # A client that subscribes and then reads nothing, with a tiny receive buffer: the
    # server's writes to it back up almost at once.
    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.connect((where.hostname, where.port))
    stalled.sendall(
        f"GET {path} HTTP/1.1\r\nHost: {where.netloc}\r\n"
        f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    try:
        with (
            httpx.Client(timeout=15) as http,
            http.stream("GET", live_api + path, headers=headers) as response,
        ):
            events = parse_lines(response.iter_lines())
            assert take(events, 1)[0].event == "status"
            sent = [
                key
                for first in range(1, 20_001, 500)
                for key in emit(bus, job_id, range(first, first + 500))
            ]
            assert ingest_until(bus, len(sent)) == len(sent)  # 20,000 points, all stored
            assert keys(take(events, len(sent))) == sent  # and all seen by the reader
        # The stalled client was a real subscriber all along: its stream is there to read.
        stalled.settimeout(5)
        assert stalled.recv(4096).startswith(b"HTTP/1.1 200")
    finally:
        stalled.close()


def test_rows_whose_feed_entry_was_lost_still_reach_a_connected_client(
    live_api: str, bus: redis.Redis, committed: Any
) -> None:
    from services.db import session_scope
    from services.telemetry import logs, metrics

    token, job_id = committed()
    url = f"{live_api}/api/v1/jobs/{job_id}/stream"
    with (
        httpx.Client(timeout=15) as http,
        http.stream("GET", url, headers={"Authorization": f"Bearer {token}"}) as response,
    ):
        events = parse_lines(response.iter_lines())
        assert take(events, 1)[0].event == "status"
        first = emit(bus, job_id, range(1, 4))
        assert ingest_until(bus, 6) == 6
        assert keys(take(events, 6)) == first
        # Stored, but their feed entries never published (as when Redis fails between
        # the commit and the publish, or restarts empty before a reader got them).
        lost = [
            {
                "job_id": job_id,
                "attempt": 1,
                "replica": 0,
                "step": s,
                "epoch": 0,
                "name": name,
                "value": s / 10,
                "ts": 1000.0 + s,
            }
            for s in (4, 5)
            for name in ("loss", "accuracy")
        ]
        with session_scope() as session:
            metrics.insert_points(session=session, rows=lost)
            logs.insert_lines(
                session=session,
                rows=[
                    {
                        "job_id": job_id,
                        "attempt": 1,
                        "replica": 0,
                        "seq": 1,
                        "ts": 1.0,
                        "line": "lost line",
                    }
                ],
            )
        then = emit(bus, job_id, range(6, 8))
        emit_logs(bus, job_id, ["next line"], first_seq=2)
        assert ingest_until(bus, 4) == 4
        assert ingest_until(bus, 1, kind="log") == 1
        got = take(events, 10)
        assert keys(got) == [(0, p["step"], p["name"]) for p in lost] + then
        assert [e.data["line"] for e in got if e.event == "log"] == ["lost line", "next line"]
        assert len({e.id for e in got}) == 10
        # A lost entry with nothing published after it (a job's final batch): the client
        # gets its rows once the feed has been quiet for a moment.
        last = [{**lost[0], "step": 8}]
        with session_scope() as session:
            metrics.insert_points(session=session, rows=last)
        assert keys(take(events, 1)) == [(0, 8, "loss")]


def test_the_status_event_is_the_job_as_rest_reads_it(live_api: str, committed: Any) -> None:
    """One view of a job whichever way it is asked for: its place in the queue and its
    progress in both."""
    token, job_id = committed(hyperparameters={"epochs": 2, "steps_per_epoch": 10})
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=live_api, timeout=15) as http:
        with http.stream(
            "GET", f"/api/v1/jobs/{job_id}/stream", params={"kinds": "status"}, headers=headers
        ) as response:
            status = next(parse_lines(response.iter_lines()))
        rest = http.get(f"/api/v1/jobs/{job_id}", headers=headers).json()
    change = status.data.pop("change")
    assert status.event == "status" and status.data == rest
    assert change["to_status"] == rest["status"] and change["from_status"] is None
    assert rest["queue_position"] >= 1 and rest["progress"]["total_steps"] == 20


def test_an_open_stream_ends_once_its_token_is_revoked(
    live_api: str, bus: redis.Redis, committed: Any
) -> None:
    """A stream outlives its request: revoking its token ends it within REAUTH_SECONDS of
    the next batch, while points keep coming (on the code before it ran on)."""
    from api.routes.streams import REAUTH_SECONDS
    from services.auth import tokens
    from services.db import session_scope

    token, job_id = committed()
    headers = {"Authorization": f"Bearer {token}"}
    with session_scope() as session:
        token_id = tokens.authenticate(session=session, token=token).id
    url = f"{live_api}/api/v1/jobs/{job_id}/stream"
    stop = threading.Event()

    def points() -> None:  # a replica reporting, and the leader storing, until told
        step = 1
        while not stop.is_set():
            emit(bus, job_id, range(step, step + 1))
            ingest_until(bus, 2, timeout=5)
            step += 1
            stop.wait(0.2)

    feeder = threading.Thread(target=points, daemon=True)
    with httpx.Client(timeout=15) as http, http.stream("GET", url, headers=headers) as response:
        assert response.status_code == 200
        events = parse_lines(response.iter_lines())
        assert next(events).event == "status"
        feeder.start()
        try:
            assert next(events).event == "metric"  # live
            with session_scope() as session:
                tokens.revoke_token(session=session, token_id=token_id)
            revoked = time.monotonic()
            after = 0
            for _ in events:  # until the server ends the response
                after += 1
                if time.monotonic() - revoked > REAUTH_SECONDS + 10:
                    break  # it runs on
            took = time.monotonic() - revoked
        finally:
            stop.set()
            feeder.join(10)
    assert took < REAUTH_SECONDS + 3, (took, after)
    assert after > 0  # points went on flowing until the check
    again = httpx.get(url, headers=headers, timeout=15)
    assert again.status_code == 401 and "revoked" in again.json()["message"]
