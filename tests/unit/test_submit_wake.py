"""A submission's wake-up (`api.routes.jobs.wake_once_more`): a burst of requests takes a
worker thread for a few of them, not each, and every request is still followed by a call
of `wake_scheduler` that began after it (none is dropped)."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import pytest

from api.routes import jobs as job_routes


def test_every_request_is_covered_by_a_call_begun_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    began: list[float] = []

    def wake(_bus: Any) -> None:
        began.append(time.monotonic())
        time.sleep(0.005)  # a Redis round trip, or the GIL held elsewhere

    monkeypatch.setattr(job_routes, "wake_scheduler", wake)
    asked: list[float] = []

    async def request(delay: float) -> None:
        await asyncio.sleep(delay)
        asked.append(time.monotonic())
        await job_routes.wake_once_more(None)  # type: ignore[arg-type]

    async def burst() -> None:
        rng = random.Random(7)
        await asyncio.gather(*(request(rng.uniform(0, 0.2)) for _ in range(300)))

    asyncio.run(burst())
    assert len(asked) == 300
    assert all(any(start >= t for start in began) for t in asked), "a request left unwoken"
    assert len(began) < 100, len(began)  # one hop for a few requests, not one each


def test_a_lone_request_wakes_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    began: list[float] = []
    monkeypatch.setattr(job_routes, "wake_scheduler", lambda _bus: began.append(1.0))

    async def twice() -> None:
        await job_routes.wake_once_more(None)  # type: ignore[arg-type]
        assert len(began) == 1
        await job_routes.wake_once_more(None)  # type: ignore[arg-type]
        assert len(began) == 2  # nothing queued any more: a call of its own

    asyncio.run(twice())
