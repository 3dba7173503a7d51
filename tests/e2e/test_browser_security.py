"""The dashboard's browser defences in Debian's Chromium against `cohort api` on PostgreSQL:
every page (and Swagger UI) runs under the Content Security Policy with no violation, no
script error and no request off the site; and a page of another origin that posts a form
to the api with the login cookie (which the browser sends: another port of the same host
is the same *site*, so SameSite=Strict does not stop it) is refused."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.capabilities import CHROMIUM, LACKS
from tests.e2e.conftest import free_port
from tests.e2e.test_behind_proxy import TOKEN, start_api

SWEEP = {
    "name": "csp",
    "template": {"trainer": "mlp_digits", "strategy": "one_device", "replicas": 1},
    "space": {"grid": {"learning_rate": [0.1, 0.01]}},
    "objective": {"metric": "eval_accuracy", "mode": "max"},
}

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason=LACKS + "Debian's chromium (make test installs it)"
    ),
]


@pytest.fixture(scope="module")
def api(pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    process, url = start_api(pg_url, tmp_path_factory.mktemp("csp"), "127.0.0.1")
    try:
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


class Watched:
    """A browser page with what would mean a broken defence collected as it goes."""

    def __init__(self, page: Any, site: str) -> None:
        self.page = page
        self.errors: list[str] = []
        self.violations: list[str] = []
        self.outside: list[str] = []
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        page.on("console", self._console)
        page.on("request", lambda r: None if r.url.startswith(site) else self.outside.append(r.url))
        # Also straight from the page's own event (an init script runs outside its CSP).
        page.add_init_script(
            "document.addEventListener('securitypolicyviolation', (e) => console.error("
            "'securitypolicyviolation: ' + e.violatedDirective + ' ' + e.blockedURI));"
        )

    def _console(self, message: Any) -> None:
        if "Content Security Policy" in message.text or "securitypolicyviolation" in message.text:
            self.violations.append(message.text)

    def check(self) -> None:
        assert not self.violations, f"CSP violations: {self.violations}"
        assert not self.errors, f"JavaScript errors: {self.errors}"
        assert not self.outside, f"requests off the site: {self.outside}"


def log_in(page: Any) -> None:
    page.goto("/login")
    page.get_by_label("API token").fill(TOKEN)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/")


def submit(api: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(
        f"{api}{path}", json=body, timeout=30, headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert response.status_code == 201, response.text
    return dict(response.json())


def test_every_page_runs_under_the_csp_with_no_violation(
    browser: Any, api: str, request: pytest.FixtureRequest
) -> None:
    job = submit(api, "/api/v1/jobs", {"name": "csp-job", "replicas": 1, "strategy": "one_device"})
    sweep = submit(api, "/api/v1/sweeps", SWEEP)
    context = browser.new_context(base_url=api)
    request.addfinalizer(context.close)  # an open stream would hold up the api's exit
    watched = Watched(context.new_page(), api)
    page = watched.page
    log_in(page)
    assert "csp-job" in page.locator("main").inner_text()
    for path, ready in [
        (f"/jobs/{job['id']}", "#job-status"),
        ("/cluster", "main"),
        ("/schedules", "main"),
        ("/sweeps", "main"),
        (f"/sweeps/{sweep['id']}", "main"),
    ]:
        response = page.goto(path)
        assert response.status == 200, path
        assert "default-src 'self'" in response.headers["content-security-policy"]
        page.locator(ready).first.wait_for()
        page.wait_for_timeout(1500)  # the page's scripts: streams, fragments, charts
    # Swagger UI, from the package: rendered, and its Authorize-free page fully drawn.
    page.goto("/docs")
    page.locator(".swagger-ui .opblock").first.wait_for(timeout=30_000)
    page.wait_for_timeout(500)
    watched.check()


class AttackerPage(SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def attacker_site(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """Another origin on the same host (so the same site): a page with a form that posts
    to the api."""
    port = free_port()
    server = ThreadingHTTPServer(
        ("127.0.0.1", port), partial(AttackerPage, directory=str(tmp_path))
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{port}", tmp_path
    finally:
        server.shutdown()


def test_a_form_posted_from_another_origin_is_refused(
    browser: Any, api: str, attacker_site: tuple[str, Path], request: pytest.FixtureRequest
) -> None:
    site, root = attacker_site
    job = submit(
        api, "/api/v1/jobs", {"name": "csrf-target", "replicas": 1, "strategy": "one_device"}
    )
    (root / "cancel.html").write_text(
        f'<form method="post" action="{api}/api/v1/jobs/{job["id"]}/cancel">'
        "<button>Win a prize</button></form>"
    )
    context = browser.new_context(base_url=api)
    request.addfinalizer(context.close)
    page = context.new_page()
    log_in(page)  # the victim is logged in to the dashboard
    page.goto(f"{site}/cancel.html")
    with page.expect_response(f"{api}/api/v1/jobs/{job['id']}/cancel") as answer:
        page.get_by_role("button", name="Win a prize").click()
    response = answer.value
    assert response.status == 403
    assert response.request.header_value("cookie") is not None  # the cookie did go along
    assert "cross-site request refused" in response.json()["message"]
    state = httpx.get(
        f"{api}/api/v1/jobs/{job['id']}", timeout=10, headers={"Authorization": f"Bearer {TOKEN}"}
    ).json()
    assert state["status"] == "queued"
    # The same cancel from the dashboard's own page goes through.
    page.goto(f"/jobs/{job['id']}")
    cancel = page.locator("#cancel-btn")
    cancel.click()  # armed
    with page.expect_response(f"{api}/api/v1/jobs/{job['id']}/cancel") as answer:
        cancel.click()  # confirmed
    assert answer.value.status == 200
    state = httpx.get(
        f"{api}/api/v1/jobs/{job['id']}", timeout=10, headers={"Authorization": f"Bearer {TOKEN}"}
    ).json()
    assert state["status"] == "cancelled"


def test_the_api_refuses_to_be_framed(api: str) -> None:
    headers = httpx.get(f"{api}/login", timeout=10).headers
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert headers["x-frame-options"] == "DENY"
