"""Behind a TLS-terminating proxy, as README "Running in production" documents: `cohort api`
marks the dashboard's session cookie Secure when the proxy says https and its address is in
FORWARDED_ALLOW_IPS, and believes no such header from anyone else."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import free_port, wait_for

TOKEN = "proxy-bootstrap-token-for-tests-only"


def start_api(
    pg_url: str, tmp_path: Path, allowed: str | None, **settings: str
) -> tuple[subprocess.Popen[bytes], str]:
    """`cohort api` as an operator starts it, trusting the proxies `allowed` lists
    (FORWARDED_ALLOW_IPS; None: unset, the default), with `settings` as its environment's
    further variables."""
    port = free_port()
    env = {name: value for name, value in os.environ.items() if name != "FORWARDED_ALLOW_IPS"}
    env |= {
        "COHORT_DATABASE_URL": pg_url,
        "COHORT_BOOTSTRAP_TOKEN": TOKEN,
        "COHORT_DATA_DIR": str(tmp_path / "data"),
        **settings,
    }
    if allowed is not None:
        env["FORWARDED_ALLOW_IPS"] = allowed
    process = subprocess.Popen(
        [sys.executable, "-m", "cli", "api", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        assert process.poll() is None, "cohort api exited"
        try:
            return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    wait_for(ready, 60, "the api to listen")
    return process, url


@pytest.fixture
def api(request: pytest.FixtureRequest, pg_url: str, tmp_path: Path) -> Iterator[str]:
    process, url = start_api(pg_url, tmp_path, request.param)
    try:
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def login_cookie(url: str, scheme: str) -> str:
    # The login form's Origin, as the browser behind the proxy sends it (api/csrf.py).
    origin = url.replace("http://", f"{scheme}://")
    response = httpx.post(
        f"{url}/login",
        data={"token": TOKEN, "next": "/"},
        headers={"X-Forwarded-Proto": "https", "Origin": origin},
        timeout=10,
    )
    assert response.status_code == 303, response.text
    return response.headers["set-cookie"]


@pytest.mark.e2e
@pytest.mark.parametrize("api", ["127.0.0.1"], indirect=True)
def test_cookie_is_secure_behind_a_trusted_proxy(api: str) -> None:
    assert "secure" in login_cookie(api, "https").lower()


@pytest.mark.e2e
@pytest.mark.parametrize("api", ["10.255.255.1"], indirect=True)
def test_forwarded_scheme_from_an_untrusted_address_is_ignored(api: str) -> None:
    # Not believed, the proxy's word leaves the request plain http, its origin too.
    assert "secure" not in login_cookie(api, "http").lower()


@pytest.mark.e2e
@pytest.mark.parametrize("api", ["127.0.0.1"], indirect=True)
def test_a_trusted_proxy_s_scheme_is_the_one_a_login_s_origin_must_have(api: str) -> None:
    # Behind the proxy the browser's page is https; an http page's login is another origin.
    response = httpx.post(
        f"{api}/login",
        data={"token": TOKEN},
        timeout=10,
        headers={"X-Forwarded-Proto": "https", "Origin": api},
    )  # http://127.0.0.1:<port>
    assert response.status_code == 403 and "cross-site" in response.json()["message"]
