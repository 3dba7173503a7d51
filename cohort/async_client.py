"""`AsyncClient`: the API from asyncio code, the same calls as `Client` (cohort/calls.py
declares each once), awaited.

    async with AsyncClient() as client:
        job = await client.submit("job.yaml", code="./src")
        async for event in job.follow():
            ...
        job = await job.wait()
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from cohort import api_models as m
from cohort import calls
from cohort.bundles import BundleInfo, pack
from cohort.events import JobEvent, is_last, typed_event
from cohort.jobs import AsyncJob
from cohort.specs import Spec, spec_dict
from cohort.sse import aparse_lines
from cohort.transport import (
    answer,
    client_settings,
    error_of,
    open_stream,
    request_args,
    retry_wait,
)
from cohort.uploads import CHUNK, PENDING_BUNDLE, Sink

T = TypeVar("T")


class AsyncClient:
    """As Client (cohort/client.py): `url`, `token`, `timeout`, `retries` alike."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 5,
    ) -> None:
        found, settings = client_settings(url, token, timeout)
        self.base_url = found.url
        self.token_source = found.token_source
        self.retries = retries
        self.http = httpx.AsyncClient(**settings)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    async def send(self, call: calls.Call[T]) -> T:
        tries_left = self.retries
        while True:
            response = await self.http.request(call.method, call.path, **request_args(call))
            wait = retry_wait(response, call, tries_left)
            if wait is None:
                return answer(call, response, self.token_source)
            tries_left -= 1
            await asyncio.sleep(wait)

    async def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        return await self.send(calls.Call(method, path, lambda x: x, json=body, repeatable=False))

    async def submit(
        self, spec: Spec, *, code: str | Path | None = None, idempotency_key: str | None = None
    ) -> AsyncJob:
        body = spec_dict(spec)
        if code is not None:
            await self.send(calls.validate({**body, "bundle": PENDING_BUNDLE}, True))
            body["bundle"] = (await self.push_code(code)).digest
        return self._job(await self.send(calls.submit(body, idempotency_key)))

    async def job(self, job_id: int) -> AsyncJob:
        return self._job(await self.send(calls.job(job_id)))

    async def jobs(self, **filters: Any) -> m.JobList:
        return await self.send(calls.jobs(**filters))

    async def cancel(self, job_id: int) -> AsyncJob:
        return self._job(await self.send(calls.cancel(job_id)))

    async def events(self, job_id: int) -> list[m.JobEventRead]:
        return await self.send(calls.events(job_id))

    async def metrics(self, job_id: int, **filters: Any) -> list[m.MetricPointRead]:
        return await self.send(calls.metrics(job_id, **filters))

    async def logs(self, job_id: int, **filters: Any) -> list[m.LogLineRead]:
        return await self.send(calls.logs(job_id, **filters))

    async def artifacts(self, job_id: int, path: str = "") -> list[m.ArtifactRead]:
        return await self.send(calls.artifacts(job_id, path))

    async def nodes(self) -> list[m.NodeRead]:
        return await self.send(calls.nodes())

    async def drain_node(self, node_id: str, reason: str = "") -> m.NodeRead:
        return await self.send(calls.drain_node(node_id, reason))

    async def undrain_node(self, node_id: str) -> m.NodeRead:
        return await self.send(calls.undrain_node(node_id))

    async def sweep(self, sweep_id: int) -> m.SweepRead:
        return await self.send(calls.sweep(sweep_id))

    async def create_sweep(self, spec: Spec) -> m.SweepRead:
        return await self.send(calls.create_sweep(spec_dict(spec, "sweep")))

    async def schedule(self, schedule_id: int) -> m.ScheduleRead:
        return await self.send(calls.schedule(schedule_id))

    async def create_schedule(self, spec: Spec) -> m.ScheduleRead:
        return await self.send(calls.create_schedule(spec_dict(spec, "schedule")))

    async def data(self) -> list[m.DataRead]:
        return await self.send(calls.data())

    async def models(self) -> list[m.ModelSummary]:
        return await self.send(calls.models())

    async def model(self, name: str) -> m.ModelRead:
        return await self.send(calls.model(name))

    async def register_version(self, name: str, job_id: int) -> m.VersionRead:
        return await self.send(calls.register_version(name, job_id))

    async def move_alias(
        self, name: str, alias: str, version: int, reason: str = ""
    ) -> m.AliasRead:
        return await self.send(calls.move_alias(name, alias, version, reason))

    async def download(
        self,
        job_id: int,
        path: str,
        dest: str | Path | Sink,
        *,
        start: int = 0,
        end: int | None = None,
    ) -> str:
        """As Client.download: one artifact streamed into `dest`; returns its Content-Type."""
        call = calls.download(job_id, path, start, end)
        async with open_stream(self.http, call) as response:
            if response.status_code >= 400:
                await response.aread()
                raise error_of(response, self.token_source)
            cut = call.cut(response.status_code)
            with contextlib.ExitStack() as stack:
                out = dest if isinstance(dest, Sink) else stack.enter_context(open(dest, "wb"))
                async for chunk in response.aiter_bytes(CHUNK):
                    if kept := cut(chunk):
                        out.write(kept)
            return str(response.headers.get("content-type", ""))

    async def follow(
        self, job_id: int, kinds: tuple[str, ...] = ("status", "metric", "log")
    ) -> AsyncIterator[JobEvent]:
        """A job's stream as typed events to its terminal status; resumes with
        Last-Event-ID after a dropped connection."""
        last_event_id: str | None = None
        while True:
            call = calls.job_stream(job_id, kinds, last_event_id)
            try:
                async with open_stream(self.http, call) as response:
                    if response.status_code == 204:
                        return
                    if response.status_code >= 400:
                        await response.aread()
                        raise error_of(response, self.token_source)
                    async for event in aparse_lines(response.aiter_lines()):
                        last_event_id = event.id or last_event_id
                        typed = typed_event(event)
                        if typed is not None:
                            yield typed
                        if is_last(event):
                            return
            except (httpx.TransportError, httpx.RemoteProtocolError):
                await asyncio.sleep(1.0)

    async def push_code(self, directory: str | Path) -> BundleInfo:
        """As Client.push_code (packing runs in a thread: it reads the whole tree)."""
        with tempfile.TemporaryDirectory(prefix="cohort-bundle-") as scratch:
            archive = Path(scratch) / "bundle.tar.gz"
            info = await asyncio.to_thread(pack, directory, archive)
            head = await self.http.head(f"/api/v1/bundles/{info.digest}")
            if head.status_code == 404:
                await self._put(f"/api/v1/bundles/{info.digest}", archive, "application/gzip")
            elif head.status_code >= 400:
                raise error_of(head, self.token_source)
        return info

    async def upload_data(self, path: str, source: str | Path) -> m.DataRead:
        body = await self._put(
            f"/api/v1/data/{quote(path)}", Path(source), "application/octet-stream"
        )
        return m.DataRead.model_validate(body)

    async def _put(self, url: str, source: Path, kind: str) -> Any:
        """PUT a local file as the body, read a chunk at a time in a thread (not into
        memory), as Client streams it."""

        async def body() -> AsyncIterator[bytes]:
            with open(source, "rb") as handle:
                while chunk := await asyncio.to_thread(handle.read, CHUNK):
                    yield chunk

        size = source.stat().st_size
        response = await self.http.put(
            url,
            content=body(),
            headers={"Content-Type": kind, "Content-Length": str(size)},
            timeout=httpx.Timeout(30.0, write=3600.0),
        )
        if response.status_code >= 400:
            raise error_of(response, self.token_source)
        return response.json()

    def _job(self, read: m.JobRead) -> AsyncJob:
        return AsyncJob.bind(self, read)
