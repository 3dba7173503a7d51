"""Browser and HTTP hardening: cross-site requests refused, security headers on every
answer, Swagger UI from the package, /metrics behind its token, /readyz naming what is
down, failed logins throttled per address (docs/security.md)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from httpx import Response
from sqlalchemy.orm import Session

from api.security_headers import SECURITY_HEADERS
from services.settings import get_settings
from tests.api.test_dashboard import login
from tests.factories import create_job, create_token

EVIL = "https://evil.example"


@pytest.fixture
def cookie_job(client: TestClient, session: Session) -> int:
    """A queued job of a project the client is logged in to with the dashboard's cookie."""
    token, row = create_token(session, "csrf")
    login(client, token)
    return create_job(session, row.project_id, name="target", replicas=1).id


def status_of(client: TestClient, job_id: int) -> str:
    return str(client.get(f"/api/v1/jobs/{job_id}").json()["status"])


def assert_cross_site_refusal(response: object, header: str) -> None:
    assert response.status_code == 403, response.text  # type: ignore[attr-defined]
    body = response.json()  # type: ignore[attr-defined]
    assert body["error"] == "forbidden" and "cross-site request refused" in body["message"]
    assert body["fields"][0]["field"] == header
    assert "Authorization: Bearer" in body["message"]  # says how a script does it instead


def test_a_cookie_cancel_from_another_site_is_refused(client: TestClient, cookie_job: int) -> None:
    response = client.post(f"/api/v1/jobs/{cookie_job}/cancel", headers={"Origin": EVIL})
    assert_cross_site_refusal(response, "Origin")
    assert EVIL in response.json()["message"]
    assert status_of(client, cookie_job) == "queued"  # nothing was done


def test_a_cookie_cancel_from_the_site_itself_goes_through(
    client: TestClient, cookie_job: int
) -> None:
    response = client.post(
        f"/api/v1/jobs/{cookie_job}/cancel", headers={"Origin": "http://testserver"}
    )
    assert response.status_code == 200, response.text
    assert status_of(client, cookie_job) == "cancelled"


def test_a_cookie_request_with_neither_origin_nor_referer_is_refused(
    client: TestClient, cookie_job: int
) -> None:
    del client.headers["Origin"]
    response = client.post(f"/api/v1/jobs/{cookie_job}/cancel")
    assert_cross_site_refusal(response, "Origin")
    assert "no Origin or Referer" in response.json()["message"]
    assert status_of(client, cookie_job) == "queued"


def test_the_referer_stands_in_for_a_missing_origin(client: TestClient, cookie_job: int) -> None:
    del client.headers["Origin"]
    response = client.post(f"/api/v1/jobs/{cookie_job}/cancel", headers={"Referer": f"{EVIL}/page"})
    assert_cross_site_refusal(response, "Referer")
    response = client.post(
        f"/api/v1/jobs/{cookie_job}/cancel",
        headers={"Referer": f"http://testserver/jobs/{cookie_job}"},
    )
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    "origin",
    ["null", "http://testserver.evil.example", "https://testserver", "http://testserver:8080"],
)
def test_only_the_exact_origin_counts(client: TestClient, cookie_job: int, origin: str) -> None:
    # A sandboxed frame's "null", a look-alike host, another scheme, another port.
    response = client.post(f"/api/v1/jobs/{cookie_job}/cancel", headers={"Origin": origin})
    assert_cross_site_refusal(response, "Origin")


def test_bearer_requests_are_not_checked(client: TestClient, session: Session) -> None:
    token, row = create_token(session, "script")
    job = create_job(session, row.project_id, name="scripted", replicas=1)
    del client.headers["Origin"]
    response = client.post(
        f"/api/v1/jobs/{job.id}/cancel",
        headers={"Authorization": f"Bearer {token}", "Origin": EVIL},
    )
    assert response.status_code == 200, response.text


def test_behind_https_the_origin_is_the_https_one(session: Session, client: TestClient) -> None:
    token, row = create_token(session, "tls")
    job = create_job(session, row.project_id, name="tls", replicas=1)
    https = TestClient(
        client.app,
        base_url="https://cohort.example",
        headers={"Origin": "https://cohort.example:443"},
    )
    assert https.post("/login", data={"token": token}, follow_redirects=False).status_code == 303
    refused = https.post(
        f"/api/v1/jobs/{job.id}/cancel", headers={"Origin": "http://cohort.example"}
    )
    assert_cross_site_refusal(refused, "Origin")
    assert https.post(f"/api/v1/jobs/{job.id}/cancel").status_code == 200


@pytest.mark.parametrize("headers", [{"Origin": EVIL}, {}], ids=["other-site", "no-origin"])
def test_a_login_from_another_site_is_refused(
    client: TestClient, token: str, headers: dict[str, str]
) -> None:
    del client.headers["Origin"]
    response = client.post("/login", data={"token": token}, headers=headers, follow_redirects=False)
    assert_cross_site_refusal(response, "Origin")
    assert "set-cookie" not in response.headers


@pytest.mark.parametrize(
    "path", ["/login", "/api/v1/jobs", "/static/dashboard.js", "/nowhere", "/docs", "/healthz"]
)
def test_every_answer_carries_the_security_headers(client: TestClient, path: str) -> None:
    response = client.get(path)
    for name, value in SECURITY_HEADERS.items():
        assert response.headers[name] == value, (path, name)
    csp = response.headers["Content-Security-Policy"]
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert response.headers["X-Content-Type-Options"] == "nosniff"


def test_a_refusal_carries_them_too(client: TestClient, cookie_job: int) -> None:
    response = client.post(f"/api/v1/jobs/{cookie_job}/cancel", headers={"Origin": EVIL})
    assert response.status_code == 403
    assert (
        response.headers["Content-Security-Policy"] == SECURITY_HEADERS["Content-Security-Policy"]
    )


def test_swagger_ui_comes_from_the_package(client: TestClient) -> None:
    page = client.get("/docs")
    assert page.status_code == 200
    assert "/static/vendor/swagger-ui-bundle.js" in page.text
    assert "/static/docs.js" in page.text
    # Nothing from outside the site, and no inline script for the CSP to block.
    assert "http://" not in page.text and "https://" not in page.text
    assert "<script>" not in page.text and "<script src=" in page.text
    for asset in (
        "/static/vendor/swagger-ui-bundle.js",
        "/static/vendor/swagger-ui.css",
        "/static/docs.js",
    ):
        assert client.get(asset).status_code == 200, asset
    assert client.get("/redoc").status_code == 404
    assert client.get("/openapi.json").status_code == 200


@pytest.fixture
def metrics_token(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("COHORT_METRICS_TOKEN", "scrape-secret-0123456789")
    get_settings.cache_clear()
    yield "scrape-secret-0123456789"
    monkeypatch.undo()
    get_settings.cache_clear()


def test_metrics_are_off_without_a_metrics_token(client: TestClient) -> None:
    response = client.get("/metrics")
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"
    assert "COHORT_METRICS_TOKEN" in response.json()["message"]


def test_metrics_want_the_metrics_token(client: TestClient, metrics_token: str, token: str) -> None:
    for headers in (
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Bearer {token}"},  # an API token is not it
        {"Authorization": f"Basic {metrics_token}"},
    ):
        response = client.get("/metrics", headers=headers)
        assert response.status_code == 401, headers
        assert response.json()["error"] == "unauthorized"
        assert response.headers["WWW-Authenticate"] == "Bearer"
    response = client.get("/metrics", headers={"Authorization": f"Bearer {metrics_token}"})
    assert response.status_code == 200
    assert "cohort_queue_depth" in response.text


def test_readyz_says_what_is_down_not_which_exception(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from services.wire.client import get_redis

    monkeypatch.setenv("COHORT_REDIS_URL", "redis://127.0.0.1:1/0")  # nothing listens
    get_settings.cache_clear()
    get_redis.cache_clear()
    try:
        response = client.get("/readyz")
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
        get_redis.cache_clear()
    assert response.status_code == 503
    assert response.json() == {
        "status": "not ready",
        "database": "ok",
        "redis": "redis unreachable",
    }


@pytest.fixture
def three_tries(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("COHORT_LOGIN_MAX_FAILURES", "3")
    monkeypatch.setenv("COHORT_LOGIN_FAILURE_WINDOW", "120")
    get_settings.cache_clear()
    yield
    monkeypatch.undo()
    get_settings.cache_clear()


def from_address(client: TestClient, address: str) -> TestClient:
    return TestClient(client.app, headers={"Origin": "http://testserver"}, client=(address, 40000))


def guess_then_log_in(client: TestClient, token: str, guesses: int) -> Response:
    """`guesses` failed logins (each a 401), then the login with the right token."""
    for _ in range(guesses):
        response = client.post("/login", data={"token": "guess"}, follow_redirects=False)
        assert response.status_code == 401
    return client.post("/login", data={"token": token}, follow_redirects=False)


def test_failed_logins_are_throttled_per_address(
    client: TestClient,
    token: str,
    three_tries: None,  # noqa: ARG001
) -> None:
    # Past the allowance even the right token waits: guesses cannot go on between
    # logins with a token of one's own.
    response = guess_then_log_in(client, token, 3)
    assert response.status_code == 429
    assert 0 < int(response.headers["Retry-After"]) <= 120
    assert "too many failed logins" in response.text and "set-cookie" not in response.headers
    # Another address is not held up.
    other = from_address(client, "198.51.100.7")
    assert other.post("/login", data={"token": token}, follow_redirects=False).status_code == 303


def test_failed_logins_are_throttled_while_redis_is_down(
    client: TestClient,
    token: str,
    three_tries: None,  # noqa: ARG001
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Redis away: the dashboard still logs in, and this process counts the failures (on
    the code before, guesses went on unthrottled for as long as Redis was down)."""
    from services.wire.client import get_redis

    monkeypatch.setenv("COHORT_REDIS_URL", "redis://127.0.0.1:1/0")  # nothing listens
    get_settings.cache_clear()
    get_redis.cache_clear()
    guesser, other = from_address(client, "203.0.113.41"), from_address(client, "203.0.113.42")
    try:
        assert (
            other.post("/login", data={"token": token}, follow_redirects=False).status_code == 303
        )  # logging in needs no Redis
        response = guess_then_log_in(guesser, token, 3)
        assert response.status_code == 429
        assert 0 < int(response.headers["Retry-After"]) <= 120
        assert (
            other.post("/login", data={"token": token}, follow_redirects=False).status_code == 303
        )
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
        get_redis.cache_clear()
