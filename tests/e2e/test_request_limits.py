"""Request limits on a real api process (uvicorn, PostgreSQL): a body declared too large is
answered before it is sent, a chunked one as it streams; non-finite numbers and ids past
64 bits are 422s, never 500s."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from tests.e2e.conftest import pg_stack_with

TOKEN = "limits-admin-token-" + "0" * 24
LIMIT = 64 * 1024


def read_response(sock: socket.socket) -> tuple[bytes, bytes]:
    """The response's head and its whole body (Content-Length), however the server's
    writes were split into segments: the head and the body may arrive apart."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the connection closed before the response's head: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")[1:]
            if line.lower().startswith(b"content-length:")
        ),
        0,
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head, body


def test_bodies_numbers_and_ids_are_bounded_on_a_real_server(tmp_path: Path) -> None:
    env = {"COHORT_BOOTSTRAP_TOKEN": TOKEN, "COHORT_MAX_REQUEST_BYTES": str(LIMIT)}
    with pg_stack_with(tmp_path, env, parts=("api",)) as (stack, _):
        auth = {"Authorization": f"Bearer {TOKEN}"}
        url = urlsplit(stack.url)
        # Declared too large: the 413 comes back though not a byte of the body was sent.
        with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
            sock.sendall(
                f"POST /api/v1/jobs HTTP/1.1\r\nHost: {url.netloc}\r\n"
                f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {100 * LIMIT}\r\n\r\n".encode()
            )
            head, body = read_response(sock)
        assert head.startswith(b"HTTP/1.1 413"), head
        assert b'"too_large"' in body and b"COHORT_MAX_REQUEST_BYTES" in body

        def chunks() -> Iterator[bytes]:  # no Content-Length: Transfer-Encoding chunked
            yield b'{"hyperparameters": {"notes": "'
            for _ in range(200):
                yield b"x" * 1024
            yield b'"}}'

        with httpx.Client(base_url=stack.url, headers=auth, timeout=30) as http:
            response = http.post(
                "/api/v1/jobs", content=chunks(), headers={"Content-Type": "application/json"}
            )
            assert response.status_code == 413, response.text
            assert response.json()["error"] == "too_large"

            response = http.post(
                "/api/v1/jobs",
                content='{"hyperparameters": {"x": Infinity}}',
                headers={"Content-Type": "application/json"},
            )
            assert response.status_code == 422, response.text
            assert response.json()["fields"][0]["field"] == "hyperparameters.x"

            for path in (
                "/api/v1/jobs/99999999999999999999",
                "/api/v1/jobs/99999999999999999999/logs",
                "/api/v1/schedules/99999999999999999999",
                "/api/v1/sweeps/99999999999999999999",
            ):
                response = http.get(path)
                assert response.status_code == 422, (path, response.text)
            assert http.post("/api/v1/jobs/2147483648/cancel").status_code == 422
            assert http.get("/api/v1/jobs/2147483647").status_code == 404
            # Nothing of the refused requests was stored.
            assert http.get("/api/v1/jobs").json()["items"] == []
            spec = {"trainer": "mlp_digits", "hyperparameters": {"hidden_units": 10**12}}
            response = http.post(
                "/api/v1/jobs",
                content=json.dumps(spec),
                headers={"Content-Type": "application/json"},
            )
            assert response.status_code == 422
            assert "1 to 4096" in response.json()["message"]
