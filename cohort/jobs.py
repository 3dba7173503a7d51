"""`Job` (and `AsyncJob`): a job as the API last said it, with what can be done to it.

Its fields are JobRead's (`job.id`, `job.status`, `job.replica_list`, ...; as a mapping
too: `job["status"]`); its methods ask its client, and `refresh()`/`wait()` return a new
Job rather than changing this one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from pydantic import PrivateAttr

from cohort.api_models import ArtifactRead, JobRead, LogLineRead, MetricPointRead
from cohort.events import TERMINAL, JobEvent

if TYPE_CHECKING:
    from cohort.async_client import AsyncClient
    from cohort.client import Client

# Waiting polls the job, from every 0.2 s up to every 2 s (a job's first seconds are when
# short jobs end; a long one is asked about rarely).
FIRST_POLL, LAST_POLL = 0.2, 2.0


class JobTimeout(TimeoutError):
    """wait() gave up before the job ended; `job` is how it was then."""

    def __init__(self, job: JobRead, timeout: float) -> None:
        super().__init__(f"job {job.id} still {job.status} after {timeout:.0f}s")
        self.job = job


class _Handle(JobRead):
    """What Job and AsyncJob share: the job's fields, and whether it has ended."""

    @property
    def ended(self) -> bool:
        return self.status in TERMINAL

    @classmethod
    def copy_of(cls, read: JobRead) -> Self:
        # From the parsed values (nested models are taken as they are): no second
        # parse of the JSON, no dump.
        return cls.model_validate({**read.__dict__, **(read.model_extra or {})})


class Job(_Handle):
    _client: Client = PrivateAttr()

    @classmethod
    def bind(cls, client: Client, read: JobRead) -> Job:
        job = cls.copy_of(read)
        job._client = client
        return job

    def refresh(self) -> Job:
        return self._client.job(self.id)

    def wait(self, timeout: float | None = None) -> Job:
        """The job once it has ended (succeeded, failed or cancelled); JobTimeout after
        `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        job, poll = self, FIRST_POLL
        while not job.ended:
            if deadline is not None and time.monotonic() >= deadline:
                raise JobTimeout(job, timeout or 0.0)
            time.sleep(poll)
            job, poll = job.refresh(), min(poll * 1.5, LAST_POLL)
        return job

    def follow(self, kinds: tuple[str, ...] = ("status", "metric", "log")) -> Iterator[JobEvent]:
        """Its status changes, metric points and output lines as they come, to its end."""
        return self._client.follow(self.id, kinds)

    def metrics(self, **filters: Any) -> list[MetricPointRead]:
        return self._client.metrics(self.id, **filters)

    def logs(self, **filters: Any) -> list[LogLineRead]:
        return self._client.logs(self.id, **filters)

    def artifacts(self) -> list[ArtifactRead]:
        return self._client.artifacts(self.id)

    def download(self, path: str, to: str | Path) -> Path:
        """One artifact into `to` (a directory arrives as a .tar.gz)."""
        self._client.download(self.id, path, to)
        return Path(to)

    def cancel(self) -> Job:
        return self._client.cancel(self.id)


class AsyncJob(_Handle):
    _client: AsyncClient = PrivateAttr()

    @classmethod
    def bind(cls, client: AsyncClient, read: JobRead) -> AsyncJob:
        job = cls.copy_of(read)
        job._client = client
        return job

    async def refresh(self) -> AsyncJob:
        return await self._client.job(self.id)

    async def wait(self, timeout: float | None = None) -> AsyncJob:
        """As Job.wait(), without blocking the event loop."""
        deadline = None if timeout is None else time.monotonic() + timeout
        job, poll = self, FIRST_POLL
        while not job.ended:
            if deadline is not None and time.monotonic() >= deadline:
                raise JobTimeout(job, timeout or 0.0)
            await asyncio.sleep(poll)
            job, poll = await job.refresh(), min(poll * 1.5, LAST_POLL)
        return job

    def follow(
        self, kinds: tuple[str, ...] = ("status", "metric", "log")
    ) -> AsyncIterator[JobEvent]:
        return self._client.follow(self.id, kinds)

    async def metrics(self, **filters: Any) -> list[MetricPointRead]:
        return await self._client.metrics(self.id, **filters)

    async def logs(self, **filters: Any) -> list[LogLineRead]:
        return await self._client.logs(self.id, **filters)

    async def artifacts(self) -> list[ArtifactRead]:
        return await self._client.artifacts(self.id)

    async def download(self, path: str, to: str | Path) -> Path:
        await self._client.download(self.id, path, to)
        return Path(to)

    async def cancel(self) -> AsyncJob:
        return await self._client.cancel(self.id)
