"""`Client`: Cohort's REST API from Python (the CLI is built on it).

    from cohort import Client
    client = Client()                      # COHORT_URL / COHORT_TOKEN, else `cohort login`'s
    job = client.submit("job.yaml", code="./src")
    for event in job.follow():             # status changes, metric points, output lines
        print(event)
    job = job.wait()                       # the job once it has ended
    job.download("model", "model.tar.gz")

Answers are typed (cohort/api_models.py, generated from the API's OpenAPI document);
errors raise ApiError with the API's error body; a 429, or a 503 of a call that is safe
to send again, is sent again after its Retry-After (at most `retries` times).
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from cohort import api_models as m
from cohort import calls
from cohort.bundles import BundleInfo, pack
from cohort.events import JobEvent, is_last, typed_event
from cohort.jobs import Job
from cohort.registry import RegistryMethods
from cohort.specs import Spec, spec_dict, with_bundle
from cohort.sse import Event, parse_lines
from cohort.transport import (
    answer,
    client_settings,
    error_of,
    open_stream,
    request_args,
    retry_wait,
)
from cohort.uploads import CHUNK, PENDING_BUNDLE, Sink, file_body
from cohort.webhooks import WebhookMethods

T = TypeVar("T")
Progress = Callable[[int], None]  # called with each chunk's size in bytes


class Client(RegistryMethods, WebhookMethods):
    """A connection to one Cohort API with one token. Use it as a context manager, or
    call close(), to release its connections."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 5,
        token_source: str | None = None,
    ) -> None:
        """`url` and `token` default to COHORT_URL / COHORT_TOKEN, else the per-user config
        (`cohort login`). `token_source`: where the token came from, named when the API
        refuses it."""
        found, settings = client_settings(url, token, timeout)
        self.base_url = found.url
        self.token_source = token_source if token_source is not None else found.token_source
        self.retries = retries
        self.http = httpx.Client(**settings)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def send(self, call: calls.Call[T]) -> T:
        """Send one call (cohort/calls.py) and return its typed answer."""
        tries_left = self.retries
        while True:
            response = self.http.request(call.method, call.path, **request_args(call))
            wait = retry_wait(response, call, tries_left)
            if wait is None:
                return answer(call, response, self.token_source)
            tries_left -= 1
            time.sleep(wait)

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """Any API request: its JSON body (None for 204); an error status raises ApiError."""
        return self.send(calls.Call(method, path, lambda x: x, json=body, repeatable=False))

    # Jobs
    def submit(
        self, spec: Spec, *, code: str | Path | None = None, idempotency_key: str | None = None
    ) -> Job:
        """Submit a job: `spec` a dict, a JobCreate, or a YAML/JSON file. With `code` (a
        directory), the spec is checked first, then the directory is packed and uploaded
        (not again if unchanged) and the job runs it."""
        body = spec_dict(spec)
        if code is not None:
            self.validate({**body, "bundle": PENDING_BUNDLE}, bundle_pending=True)
            body["bundle"] = self.push_code(code).digest
        return self._job(self.send(calls.submit(body, idempotency_key)))

    def validate(self, spec: Spec, bundle_pending: bool = False) -> m.JobSpec:
        """The spec as a submission would store it; a refused spec raises ApiError (422)."""
        return self.send(calls.validate(spec_dict(spec), bundle_pending))

    def job(self, job_id: int) -> Job:
        return self._job(self.send(calls.job(job_id)))

    def jobs(self, **filters: Any) -> m.JobList:
        """One page of the project's jobs, newest first (`status`, `name`, `schedule_id`,
        `sweep_id`, `limit`, `cursor`: the page's `next_cursor`)."""
        return self.send(calls.jobs(**filters))

    def iter_jobs(self, **filters: Any) -> Iterator[Job]:
        """Every job the filters match, newest first, page after page."""
        cursor = None
        while True:
            page = self.jobs(**filters, cursor=cursor)
            yield from (self._job(job) for job in page.items)
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def cancel(self, job_id: int) -> Job:
        return self._job(self.send(calls.cancel(job_id)))

    def events(self, job_id: int) -> list[m.JobEventRead]:
        return self.send(calls.events(job_id))

    def metrics(self, job_id: int, **filters: Any) -> list[m.MetricPointRead]:
        """Stored points (`name`, `replica`, `attempt`, `since_step`, `limit`, `max_points`)."""
        return self.send(calls.metrics(job_id, **filters))

    def logs(self, job_id: int, **filters: Any) -> list[m.LogLineRead]:
        """Stored output lines, oldest first (`replica`, `attempt`, `tail`, `limit`)."""
        return self.send(calls.logs(job_id, **filters))

    def artifacts(self, job_id: int, path: str = "") -> list[m.ArtifactRead]:
        """The job's files with their size and sha256 (with `path`, those under that
        directory of the job only)."""
        return self.send(calls.artifacts(job_id, path))

    def download(
        self,
        job_id: int,
        path: str,
        dest: str | Path | Sink,
        progress: Progress | None = None,
        *,
        start: int = 0,
        end: int | None = None,
    ) -> str:
        """Stream one artifact (a file, or a directory as .tar.gz) into `dest` (a path, or
        a binary file open for writing); returns its Content-Type. `start`, `end` (end
        excluded): only those bytes of a file (a Range; from an API that sends the whole
        file anyway, the rest is cut off here)."""
        return self.fetch(calls.download(job_id, path, start, end), dest, progress)

    def fetch(
        self, call: calls.Streamed, dest: str | Path | Sink, progress: Progress | None = None
    ) -> str:
        """`download`'s work for any download call (a job's artifact, a model version's)."""
        with open_stream(self.http, call) as response:
            if response.status_code >= 400:
                response.read()
                raise error_of(response, self.token_source)
            cut = call.cut(response.status_code)
            with contextlib.ExitStack() as stack:
                out = dest if isinstance(dest, Sink) else stack.enter_context(open(dest, "wb"))
                for chunk in response.iter_bytes(CHUNK):
                    if kept := cut(chunk):
                        out.write(kept)
                        if progress is not None:
                            progress(len(kept))
            return str(response.headers.get("content-type", ""))

    def stream(
        self,
        job_id: int,
        *,
        kinds: tuple[str, ...] = ("status", "metric", "log"),
        last_event_id: str | None = None,
    ) -> Iterator[Event]:
        """A job's SSE events as sent (JSON data), to its terminal status; resumes with
        Last-Event-ID after a dropped connection."""
        while True:
            call = calls.job_stream(job_id, kinds, last_event_id)
            try:
                with open_stream(self.http, call) as response:
                    if response.status_code == 204:  # had the terminal status: over
                        return
                    if response.status_code >= 400:
                        response.read()
                        raise error_of(response, self.token_source)
                    for event in parse_lines(response.iter_lines()):
                        last_event_id = event.id or last_event_id
                        yield event
                        if is_last(event):
                            return
            except (httpx.TransportError, httpx.RemoteProtocolError):
                time.sleep(1.0)  # dropped: resume exactly where we were

    def follow(
        self, job_id: int, kinds: tuple[str, ...] = ("status", "metric", "log")
    ) -> Iterator[JobEvent]:
        """A job's stream as typed events (cohort/events.py), to its terminal status."""
        for event in self.stream(job_id, kinds=kinds):
            typed = typed_event(event)
            if typed is not None:
                yield typed

    def nodes(self) -> list[m.NodeRead]:
        return self.send(calls.nodes())

    def drain_node(self, node_id: str, reason: str = "") -> m.NodeRead:
        return self.send(calls.drain_node(node_id, reason))

    def undrain_node(self, node_id: str) -> m.NodeRead:
        return self.send(calls.undrain_node(node_id))

    # Code bundles and data
    def has_bundle(self, digest: str) -> bool:
        """Whether this project has uploaded the bundle (HEAD: 200 or 404)."""
        response = self.http.head(f"/api/v1/bundles/{digest}")
        if response.status_code == 404:
            return False
        if response.status_code >= 400:
            raise error_of(response, self.token_source)
        return True

    def upload_bundle(self, digest: str, path: Path, progress: Progress | None = None) -> Any:
        """PUT a packed bundle, streamed from disk."""
        url = f"/api/v1/bundles/{digest}"
        return self._put_file(url, Path(path), "application/gzip", 300.0, progress)

    def push_code(self, directory: str | Path, progress: Progress | None = None) -> BundleInfo:
        """Pack `directory` (.cohortignore honoured) and upload it unless the project has
        it; the BundleInfo's digest is what a spec's `bundle` names."""
        with tempfile.TemporaryDirectory(prefix="cohort-bundle-") as scratch:
            archive = Path(scratch) / "bundle.tar.gz"
            info = pack(directory, archive)
            if not self.has_bundle(info.digest):
                self.upload_bundle(info.digest, archive, progress)
        return info

    def upload_data(
        self, path: str, source: str | Path, progress: Progress | None = None
    ) -> m.DataRead:
        """PUT a file to `path` of the project's data (a job names it `data/<path>`)."""
        url = f"/api/v1/data/{quote(path)}"
        body = self._put_file(url, Path(source), "application/octet-stream", 3600.0, progress)
        return m.DataRead.model_validate(body)

    def data(self) -> list[m.DataRead]:
        return self.send(calls.data())

    def delete_data(self, path: str) -> None:
        self.send(calls.delete_data(path))

    def _put_file(
        self, url: str, source: Path, kind: str, write_timeout: float, progress: Progress | None
    ) -> Any:
        """PUT a local file as the body, streamed from disk (not read into memory)."""
        size = source.stat().st_size
        with open(source, "rb") as handle:
            response = self.http.put(
                url,
                content=file_body(handle, progress),
                headers={"Content-Type": kind, "Content-Length": str(size)},
                timeout=httpx.Timeout(30.0, write=write_timeout),
            )
        if response.status_code >= 400:
            raise error_of(response, self.token_source)
        return response.json()

    # Sweeps, schedules, the caller
    def create_sweep(self, spec: Spec) -> m.SweepRead:
        return self.send(calls.create_sweep(spec_dict(spec, "sweep")))

    def sweep(self, sweep_id: int) -> m.SweepRead:
        return self.send(calls.sweep(sweep_id))

    def sweeps(self, **filters: Any) -> m.SweepList:
        return self.send(calls.sweeps(**filters))

    def cancel_sweep(self, sweep_id: int) -> m.SweepRead:
        return self.send(calls.cancel_sweep(sweep_id))

    def create_schedule(self, spec: Spec, *, code: str | Path | None = None) -> m.ScheduleRead:
        """Create a schedule. With `code` (a directory), its job runs that code: pushed as
        a bundle (once: an unchanged directory is not sent again), the template's `bundle`
        set to its digest."""
        body = spec_dict(spec, "schedule")
        if code is not None:
            body = with_bundle(body, self.push_code(code).digest)
        return self.send(calls.create_schedule(body))

    def schedule(self, schedule_id: int) -> m.ScheduleRead:
        return self.send(calls.schedule(schedule_id))

    def schedules(self) -> list[m.ScheduleRead]:
        return self.send(calls.schedules())

    def update_schedule(self, schedule_id: int, changes: dict[str, Any]) -> m.ScheduleRead:
        return self.send(calls.update_schedule(schedule_id, changes))

    def pause_schedule(self, schedule_id: int) -> m.ScheduleRead:
        return self.send(calls.schedule_action(schedule_id, "pause"))

    def resume_schedule(self, schedule_id: int) -> m.ScheduleRead:
        return self.send(calls.schedule_action(schedule_id, "resume"))

    def trigger_schedule(self, schedule_id: int) -> m.ScheduleRunRead:
        return self.send(calls.trigger_schedule(schedule_id))

    def delete_schedule(self, schedule_id: int) -> None:
        self.send(calls.delete_schedule(schedule_id))

    def promoted_model(self, schedule_id: int) -> m.PromotedModel:
        return self.send(calls.promoted_model(schedule_id))

    def whoami(self) -> m.TokenRead:
        return self.send(calls.whoami())

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

    def _job(self, read: m.JobRead) -> Job:
        return Job.bind(self, read)
