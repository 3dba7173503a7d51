"""Tokens the way an admin handles them: `cohort api` started with COHORT_BOOTSTRAP_TOKEN in
its environment, `cohort token create|list|revoke` run as commands against it, and the
bootstrap token rotated by restarting the api with a new value."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import free_port, wait_for


def new_bootstrap() -> str:
    return "bootstrap-" + secrets.token_hex(16)  # 42 characters


@contextmanager
def running_api(pg_url: str, tmp_path: Path, bootstrap: str) -> Iterator[str]:
    """`cohort api` on `pg_url` with `bootstrap` as COHORT_BOOTSTRAP_TOKEN; its address."""
    port = free_port()
    env = {
        **os.environ,
        "COHORT_DATABASE_URL": pg_url,
        "COHORT_BOOTSTRAP_TOKEN": bootstrap,
        "COHORT_DATA_DIR": str(tmp_path / "data"),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "cli", "api", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"cohort api exited: {process.stderr.read().decode()}")
        try:
            return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(ready, 60, "the api to be ready")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def cohort(url: str, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COHORT_URL": url, "COHORT_TOKEN": token, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "cli", *args], env=env, capture_output=True, text=True, timeout=60
    )


def status(url: str, token: str, path: str = "/api/v1/jobs") -> httpx.Response:
    return httpx.get(url + path, headers={"Authorization": f"Bearer {token}"}, timeout=10)


@pytest.mark.e2e
def test_an_admin_issues_lists_and_revokes_tokens_with_the_cli(pg_url: str, tmp_path: Path) -> None:
    admin = new_bootstrap()
    with running_api(pg_url, tmp_path, admin) as url:
        made = cohort(
            url,
            admin,
            "tokens",
            "create",
            "--project",
            "team-cli",
            "--name",
            "ci",
            "--scope",
            "read",
            "--scope",
            "submit",
            "--expires-in",
            "30d",
        )
        assert made.returncode == 0, made.stderr
        secret = made.stdout.strip()
        assert secret.startswith("coh_") and "\n" not in secret
        assert "not shown again" in made.stderr and "project team-cli" in made.stderr
        assert status(url, secret).status_code == 200

        listed = cohort(url, admin, "tokens", "list", "--project", "team-cli", "--json")
        assert listed.returncode == 0, listed.stderr
        [item] = json.loads(listed.stdout)
        assert item["name"] == "ci" and item["scopes"] == ["read", "submit"]
        assert item["state"] == "active" and item["expires_at"] and secret not in listed.stdout
        table = cohort(url, admin, "tokens", "list")
        assert "team-cli" in table.stdout and "bootstrap" in table.stdout

        # Not an admin: the CLI says what is missing and how to get it, exit 2.
        refused = cohort(url, secret, "tokens", "list")
        assert refused.returncode == 2
        assert "HTTP 403" in refused.stderr and "lacks the 'admin' scope" in refused.stderr

        revoked = cohort(url, admin, "tokens", "revoke", str(item["id"]))
        assert revoked.returncode == 0, revoked.stderr
        assert f"revoked token {item['id']}" in revoked.stdout
        after = status(url, secret)
        assert after.status_code == 401 and "revoked" in after.json()["message"]

        bad = cohort(url, admin, "tokens", "create", "--name", "x", "--scope", "root")
        assert bad.returncode == 2 and "root" in bad.stderr


@pytest.mark.e2e
def test_rotating_the_bootstrap_token_revokes_the_old_one_and_its_sessions(
    pg_url: str, tmp_path: Path
) -> None:
    old, new = new_bootstrap(), new_bootstrap()
    with running_api(pg_url, tmp_path, old) as url:
        assert status(url, old).status_code == 200
        login = httpx.post(f"{url}/login", data={"token": old}, headers={"Origin": url}, timeout=10)
        session_id = (
            login.history[0].cookies["cohort_session"]
            if login.history
            else login.cookies["cohort_session"]
        )
        assert (
            httpx.get(
                f"{url}/api/v1/jobs", cookies={"cohort_session": session_id}, timeout=10
            ).status_code
            == 200
        )
    with running_api(pg_url, tmp_path, new) as url:
        refused = status(url, old)
        assert refused.status_code == 401
        assert "'bootstrap' was revoked" in refused.json()["message"]
        assert (
            httpx.get(
                f"{url}/api/v1/jobs", cookies={"cohort_session": session_id}, timeout=10
            ).status_code
            == 401
        )
        assert status(url, new).status_code == 200
        assert status(url, new, "/api/v1/tokens").status_code == 200
    # Starting again with the new value keeps it (no rotation without a change).
    with running_api(pg_url, tmp_path, new) as url:
        assert status(url, new).status_code == 200


@pytest.mark.e2e
def test_a_short_bootstrap_token_stops_the_api_in_one_line(pg_url: str, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "COHORT_DATABASE_URL": pg_url,
        "COHORT_BOOTSTRAP_TOKEN": "change-me",
        "COHORT_DATA_DIR": str(tmp_path),
    }
    result = subprocess.run(
        [sys.executable, "-m", "cli", "api", "--port", str(free_port())],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "cohort: COHORT_BOOTSTRAP_TOKEN is 9 characters; an admin token needs at least 32: "
        "make one with `openssl rand -hex 32`"
    ]
