"""`cohort api` (which `cohort up` runs) as an operator starts it: without
FORWARDED_ALLOW_IPS it trusts no proxy, so a process of the same host (a replica, on the
default stack) that sends X-Forwarded-For from 127.0.0.1 cannot pick the address the login
throttle counts its guesses by (api/login_throttle.py; tests/e2e/test_behind_proxy.py has
the proxy it is told of); and it runs under umask 077 (services/data_dir.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from tests.conftest import redis_url
from tests.e2e.test_behind_proxy import start_api

pytestmark = pytest.mark.e2e

GUESSES = 3  # COHORT_LOGIN_MAX_FAILURES


@pytest.fixture
def api(pg_url: str, tmp_path: Path) -> Iterator[tuple[str, int]]:
    """`cohort api` as an operator starts it, FORWARDED_ALLOW_IPS unset."""
    bus = redis_url("stack")
    redis.Redis.from_url(bus).flushdb()  # no earlier failures counted for 127.0.0.1
    process, url = start_api(
        pg_url, tmp_path, None, COHORT_REDIS_URL=bus, COHORT_LOGIN_MAX_FAILURES=str(GUESSES)
    )
    try:
        yield url, process.pid
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_a_local_process_cannot_choose_the_address_its_failed_logins_count_for(
    api: tuple[str, int],
) -> None:
    url, _pid = api

    def guess(address: str) -> int:
        response = httpx.post(
            f"{url}/login",
            data={"token": "coh_wrong", "next": "/"},
            headers={"Origin": url, "X-Forwarded-For": address},
            timeout=10,
        )
        return response.status_code

    assert [guess(f"203.0.113.{n}") for n in range(GUESSES)] == [401] * GUESSES
    # Each claimed another address; all were counted for the peer, 127.0.0.1.
    assert guess("198.51.100.7") == 429


def test_the_api_creates_files_for_its_own_user_only(api: tuple[str, int]) -> None:
    # Started from a shell whose umask is the usual 022 (this test's).
    _url, pid = api
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    assert [line.split()[1] for line in status if line.startswith("Umask:")] == ["0077"]
