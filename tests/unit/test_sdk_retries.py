"""The SDK against a real HTTP server that refuses: a 429 is sent again after its
Retry-After, so is a 503 of a call safe to repeat (a GET, a submission with its
Idempotency-Key), never a 503 of a call that is not (a cancel); the error that ends it
carries the API's error body."""

from __future__ import annotations

import datetime as dt
import email.utils
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from cohort.client import Client
from cohort.errors import ApiError
from cohort.transport import parse_retry_after
from tests.unit.test_cli_style import JOB


class Refusing(BaseHTTPRequestHandler):
    """Answers each request with the next of `plan` (status, headers), then the job."""

    plan: list[tuple[int, dict[str, str]]] = []
    seen: list[tuple[str, str, float, str | None]] = []

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        key = self.headers.get("idempotency-key")
        Refusing.seen.append((self.command, self.path, time.monotonic(), key))
        status, headers = Refusing.plan.pop(0) if Refusing.plan else (200, {})
        body = JOB if status == 200 else {"error": "busy", "message": f"try later ({status})"}
        data = json.dumps(body).encode()
        self.send_response(status)
        for name, value in {**headers, "content-type": "application/json"}.items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    Refusing.plan, Refusing.seen = [], []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_a_429_is_sent_again_after_its_retry_after(server: str) -> None:
    Refusing.plan = [(429, {"retry-after": "1"}), (429, {"retry-after": "0"})]
    with Client(server, "tok") as client:
        job = client.job(1)
    assert job.id == 1 and job.status == "queued"
    times = [seen[2] for seen in Refusing.seen]
    assert len(times) == 3
    assert times[1] - times[0] >= 0.95  # waited the second it was told


def test_a_submission_is_repeated_after_a_503_with_the_same_key(server: str) -> None:
    Refusing.plan = [(503, {"retry-after": "0"})]
    with Client(server, "tok") as client:
        job = client.submit({"name": "x", "command": ["python", "t.py"]})
    assert job.id == 1
    keys = [seen[3] for seen in Refusing.seen]
    assert len(keys) == 2 and keys[0] and keys[0] == keys[1]  # one job, whatever happened


def test_a_503_of_a_call_not_safe_to_repeat_is_answered_as_it_is(server: str) -> None:
    Refusing.plan = [(503, {"retry-after": "0"})]
    with Client(server, "tok") as client, pytest.raises(ApiError) as refused:
        client.cancel(1)
    assert refused.value.status == 503
    assert refused.value.body == {"error": "busy", "message": "try later (503)"}
    assert len(Refusing.seen) == 1


def test_retries_end_and_the_last_answer_is_the_error(server: str) -> None:
    Refusing.plan = [(429, {"retry-after": "0"})] * 3
    with Client(server, "tok", retries=2) as client, pytest.raises(ApiError) as refused:
        client.job(1)
    assert refused.value.status == 429 and len(Refusing.seen) == 3


def test_retry_after_as_seconds_or_an_http_date() -> None:
    now = dt.datetime(2026, 11, 29, 12, 0, 0, tzinfo=dt.UTC)
    later = email.utils.format_datetime(now + dt.timedelta(seconds=7), usegmt=True)
    assert parse_retry_after("3", now) == 3.0
    assert parse_retry_after(later, now) == 7.0
    assert parse_retry_after(None, now) == 1.0
    assert parse_retry_after("soon", now) == 1.0
