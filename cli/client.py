"""A small client of Cohort's REST API, used by the CLI, the demo and the benchmarks."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

import httpx

from cli.sse import Event, parse_lines
from cli.user_config import resolve, unauthorized_hint
from services.statuses import TERMINAL_STATUSES


class Sink(Protocol):
    """Where a download goes when it is not a path: a binary file open for writing."""

    def write(self, data: bytes, /) -> object: ...


class ApiError(RuntimeError):
    """The API answered with an error; the message is the API's own (and, for a 401,
    which token was refused and how to fix it)."""

    def __init__(self, status: int, body: Any, hint: str = "") -> None:
        message = body.get("message") if isinstance(body, dict) else str(body)
        super().__init__(f"HTTP {status}: {message}" + (f"; {hint}" if hint else ""))
        self.status = status
        self.body = body


def resolve_token(explicit: str | None = None) -> str | None:
    """--token, else COHORT_TOKEN, else the per-user config's or the local stack's
    (cli/user_config.py)."""
    return resolve(None, explicit or os.environ.get("COHORT_TOKEN") or None).token


def default_url() -> str:
    return os.environ.get("COHORT_URL") or resolve(None, None).url


class CohortClient:
    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        timeout: float = 30.0,
        token_source: str | None = None,
    ) -> None:
        """`token_source`: where the token came from, named when the API refuses it
        (None: a caller that chose it, such as the stack's own)."""
        self.base_url = (base_url or default_url()).rstrip("/")
        self.token_source = token_source
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)

    def _check(self, response: httpx.Response) -> Any:
        try:
            body = response.json()
        except ValueError:
            body = response.text
        if response.status_code >= 400:
            hint = ""
            if response.status_code == 401 and self.token_source is not None:
                hint = unauthorized_hint(self.token_source)
            raise ApiError(response.status_code, body, hint)
        return body

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """Any API request: its JSON body, None for 204; an error status raises ApiError."""
        response = self.http.request(method, path, json=body)
        return None if response.status_code == 204 else self._check(response)

    def submit(self, spec: dict[str, Any], idempotency_key: str | None = None) -> dict[str, Any]:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return self._check(self.http.post("/api/v1/jobs", json=spec, headers=headers))

    def validate(self, spec: dict[str, Any], bundle_pending: bool = False) -> dict[str, Any]:
        """The spec as a submission would store it; a refused one raises ApiError (422)."""
        params = {"bundle_pending": "true"} if bundle_pending else {}
        return self._check(self.http.post("/api/v1/validate/job", json=spec, params=params))

    def job(self, job_id: int) -> dict[str, Any]:
        return self._check(self.http.get(f"/api/v1/jobs/{job_id}"))

    def jobs(self, **params: Any) -> dict[str, Any]:
        return self._check(self.http.get("/api/v1/jobs", params=params))

    def cancel(self, job_id: int) -> dict[str, Any]:
        return self._check(self.http.post(f"/api/v1/jobs/{job_id}/cancel"))

    def events(self, job_id: int) -> list[dict[str, Any]]:
        return self._check(self.http.get(f"/api/v1/jobs/{job_id}/events"))

    def metrics(self, job_id: int, **params: Any) -> list[dict[str, Any]]:
        return self._check(self.http.get(f"/api/v1/jobs/{job_id}/metrics", params=params))["items"]

    def nodes(self) -> list[dict[str, Any]]:
        return self._check(self.http.get("/api/v1/nodes"))

    def logs(self, job_id: int, **params: Any) -> list[dict[str, Any]]:
        return self._check(self.http.get(f"/api/v1/jobs/{job_id}/logs", params=params))["items"]

    def stream(
        self,
        job_id: int,
        *,
        kinds: tuple[str, ...] = ("status", "metric", "log"),
        last_event_id: str | None = None,
    ) -> Iterator[Event]:
        """Events of a job's SSE stream, to its terminal status; reconnects with
        Last-Event-ID if it drops."""
        while True:
            headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
            try:
                with self.http.stream(
                    "GET",
                    f"/api/v1/jobs/{job_id}/stream",
                    params={"kinds": list(kinds)},
                    headers=headers,
                    timeout=httpx.Timeout(10.0, read=60.0),
                ) as response:
                    if response.status_code == 204:  # had the terminal status: over
                        return
                    if response.status_code >= 400:
                        response.read()
                        self._check(response)
                    for event in parse_lines(response.iter_lines()):
                        last_event_id = event.id or last_event_id
                        yield event
                        if (
                            event.event == "status"
                            and event.data.get("status") in TERMINAL_STATUSES
                        ):
                            return  # the stream's last event
            except (httpx.TransportError, httpx.RemoteProtocolError):
                time.sleep(1.0)  # dropped: resume exactly where we were

    def has_bundle(self, digest: str) -> bool:
        """Whether this project has uploaded the bundle (HEAD: 200 or 404)."""
        response = self.http.head(f"/api/v1/bundles/{digest}")
        if response.status_code == 404:
            return False
        if response.status_code >= 400:
            raise ApiError(response.status_code, f"HEAD /api/v1/bundles/{digest} failed")
        return True

    def upload_bundle(self, digest: str, path: Path) -> dict[str, Any]:
        """PUT a bundle file, streamed from disk."""
        return self._put_file(f"/api/v1/bundles/{digest}", path, "application/gzip", 300.0)

    def artifacts(self, job_id: int, path: str = "") -> list[dict[str, Any]]:
        """The job's files (with `path`, those under that directory of the job)."""
        params = {"path": path} if path else {}
        return self._check(
            self.http.get(f"/api/v1/jobs/{job_id}/artifacts", params=params, timeout=300.0)
        )["items"]

    def download(
        self, job_id: int, path: str, dest: Path | Sink, *, start: int = 0, end: int | None = None
    ) -> str:
        """Stream one artifact (a file, or a directory as .tar.gz) into `dest` (a path, or
        a binary file open for writing); returns its Content-Type. `start`, `end` (end
        excluded): only those bytes of a file (a Range; an API that sends the whole file
        anyway has the rest cut off here)."""
        ranged = start > 0 or end is not None
        last = "" if end is None else str(end - 1)
        with self.http.stream(
            "GET",
            f"/api/v1/jobs/{job_id}/artifacts/download",
            params={"path": path},
            headers={"Range": f"bytes={start}-{last}"} if ranged else {},
            timeout=httpx.Timeout(30.0, read=300.0),
        ) as response:
            if response.status_code >= 400:
                response.read()
                self._check(response)
            skip = start if ranged and response.status_code != 206 else 0
            left = None if end is None else end - start
            with contextlib.ExitStack() as stack:
                out = stack.enter_context(open(dest, "wb")) if isinstance(dest, Path) else dest
                for chunk in response.iter_bytes(1 << 20):
                    chunk, skip = chunk[skip:], max(0, skip - len(chunk))
                    if left is not None:
                        chunk, left = chunk[:left], max(0, left - len(chunk))
                    out.write(chunk)
            return response.headers.get("content-type", "")

    def upload_data(self, path: str, source: Path) -> dict[str, Any]:
        """PUT a file to `path` of the project's data, streamed from disk."""
        return self._put_file(
            f"/api/v1/data/{quote(path)}", source, "application/octet-stream", 3600.0
        )

    def _put_file(
        self, url: str, source: Path, content_type: str, write_timeout: float
    ) -> dict[str, Any]:
        """PUT a local file as the body, streamed from disk (not read into memory)."""
        with open(source, "rb") as body:
            return self._check(
                self.http.put(
                    url,
                    content=body,
                    headers={
                        "Content-Type": content_type,
                        "Content-Length": str(source.stat().st_size),
                    },
                    timeout=httpx.Timeout(30.0, write=write_timeout),
                )
            )

    def data(self) -> list[dict[str, Any]]:
        return self._check(self.http.get("/api/v1/data", timeout=300.0))["items"]

    def delete_data(self, path: str) -> None:
        response = self.http.delete(f"/api/v1/data/{quote(path)}")
        if response.status_code >= 400:
            self._check(response)

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait until /readyz says the API, SQL and Redis are up."""
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            try:
                response = self.http.get("/readyz", timeout=2.0)
                if response.status_code == 200:
                    return
                last = response.text
            except httpx.HTTPError as exc:
                last = exc
            time.sleep(0.1)
        raise TimeoutError(f"API at {self.base_url} not ready after {timeout:.0f}s: {last}")
