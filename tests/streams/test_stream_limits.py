"""Open live streams per token, against a real api server: the one past
COHORT_MAX_STREAMS_PER_TOKEN gets 429 with Retry-After and Cohort's error body, other
tokens are not held up, and a closed stream gives its place back."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import pytest


@pytest.fixture
def two_streams_each(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from services.settings import get_settings

    monkeypatch.setenv("COHORT_MAX_STREAMS_PER_TOKEN", "2")
    get_settings.cache_clear()
    yield
    monkeypatch.undo()
    get_settings.cache_clear()


def open_stream(stack: ExitStack, client: httpx.Client, path: str, token: str) -> httpx.Response:
    return stack.enter_context(
        client.stream("GET", path, headers={"Authorization": f"Bearer {token}"})
    )


def test_streams_past_the_per_token_cap_get_429(
    two_streams_each: None,  # noqa: ARG001
    live_api: str,
    committed: Any,
) -> None:
    token, job_id = committed()
    other_token, other_job = committed(project="other")
    with httpx.Client(base_url=live_api, timeout=10) as client, ExitStack() as stack:
        # Job streams and project streams count alike.
        first = open_stream(stack, client, f"/api/v1/jobs/{job_id}/stream", token)
        second = open_stream(stack, client, "/api/v1/stream", token)
        assert first.status_code == second.status_code == 200
        refused = client.get(
            f"/api/v1/jobs/{job_id}/stream", headers={"Authorization": f"Bearer {token}"}
        )
        assert refused.status_code == 429
        assert int(refused.headers["Retry-After"]) > 0
        body = refused.json()
        assert body["error"] == "too_many_requests"
        assert "COHORT_MAX_STREAMS_PER_TOKEN" in body["message"]
        # Another token has its own allowance.
        theirs = open_stream(stack, client, f"/api/v1/jobs/{other_job}/stream", other_token)
        assert theirs.status_code == 200
        # A stream closed by its client gives its place back.
        first.close()
        deadline = time.monotonic() + 10
        while True:
            with client.stream(
                "GET", f"/api/v1/jobs/{job_id}/stream", headers={"Authorization": f"Bearer {token}"}
            ) as again:
                if again.status_code == 200:
                    break
                assert again.status_code == 429
            assert time.monotonic() < deadline, "the closed stream's place never came back"
            time.sleep(0.2)
