"""Roles: every route checks a scope, and each scope reaches what it should and no more
(REST, SSE streams, dashboard pages and the dashboard's actions alike)."""

from __future__ import annotations

import re
from typing import Any

from fastapi.routing import APIRoute, RouteContext, iter_route_contexts
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session
from starlette.routing import Mount, Route

from api.deps import ScopeRule
from services.auth.scopes import Scope
from tests.factories import create_job, create_token

# Open to anyone: probes, the login form, the service's metrics, the API's own docs.
OPEN = {
    "/healthz",
    "/readyz",
    "/login",
    "/logout",
    "/metrics",
    "/openapi.json",
    "/docs",
    "/docs/oauth2-redirect",
    "/redoc",
}
JOB = {"name": "j", "strategy": "one_device", "replicas": 1}
SCHEDULE = {"name": "nightly", "interval_seconds": 3600, "job": JOB}


def app_routes() -> list[RouteContext]:
    """Every route of the app, with what the routers it was included through added."""
    from api.main import create_app

    return list(iter_route_contexts(create_app().routes))


def scope_rules(route: RouteContext) -> list[ScopeRule]:
    """Every ScopeRule among the route's dependencies, however deep."""
    found, todo = [], [route.dependant]
    while todo:
        dependant = todo.pop()
        if isinstance(dependant.call, ScopeRule):
            found.append(dependant.call)
        todo.extend(dependant.dependencies)
    return found


def test_every_route_but_the_open_ones_checks_a_scope() -> None:
    unchecked, checked = [], 0
    for route in app_routes():
        original = route.original_route
        if isinstance(original, Mount) and original.path == "/static":
            continue
        if isinstance(original, APIRoute):
            if route.path in OPEN:
                assert not scope_rules(route), f"{route.path} is meant to be open"
                continue
            if not scope_rules(route):
                unchecked.append(f"{sorted(route.methods or ())} {route.path}")
            checked += 1
        elif isinstance(original, Route) and route.path in OPEN:
            continue
        else:
            unchecked.append(f"{type(original).__name__} {route.path}")
    assert not unchecked, f"routes without a scope rule: {unchecked}"
    assert checked > 40  # the walk saw the app's routes


def test_the_rule_takes_read_for_get_and_head_and_the_routers_scope_otherwise() -> None:
    needs = {}
    for route in app_routes():
        if isinstance(route.original_route, APIRoute) and route.path not in OPEN:
            for method in route.methods or ():
                needs[(method, route.path)] = {r.needed(method) for r in scope_rules(route)}
    assert needs[("GET", "/api/v1/jobs")] == {Scope.READ}
    assert needs[("POST", "/api/v1/jobs")] == {Scope.SUBMIT}
    assert needs[("POST", "/api/v1/jobs/{job_id}/cancel")] == {Scope.SUBMIT}
    assert needs[("HEAD", "/api/v1/bundles/{digest}")] == {Scope.SUBMIT}  # uploading
    assert needs[("PUT", "/api/v1/bundles/{digest}")] == {Scope.SUBMIT}
    assert needs[("PUT", "/api/v1/data/{path:path}")] == {Scope.SUBMIT}
    assert needs[("POST", "/api/v1/sweeps")] == {Scope.SUBMIT}
    assert needs[("PATCH", "/api/v1/schedules/{schedule_id}")] == {Scope.SCHEDULES}
    assert needs[("GET", "/api/v1/tokens")] == {Scope.ADMIN}
    assert needs[("DELETE", "/api/v1/tokens/{token_id}")] == {Scope.ADMIN}
    assert needs[("GET", "/api/v1/jobs/{job_id}/stream")] == {Scope.READ}
    assert needs[("GET", "/")] == {Scope.READ}
    assert needs[("GET", "/sweeps/{sweep_id}")] == {Scope.READ}


def bearer(session: Session, *scopes: Scope, project: str = "default") -> dict[str, str]:
    return {"Authorization": f"Bearer {create_token(session, project, scopes)[0]}"}


def assert_forbidden(response: Any, scope: str) -> None:
    assert response.status_code == 403, response.text
    body = response.json()
    assert body["error"] == "forbidden"
    assert f"lacks the '{scope}' scope" in body["message"]
    assert f"cohort token create --project default --name NAME --scope {scope}" in body["message"]


def test_a_read_token_reads_and_is_refused_every_write(
    client: TestClient, session: Session
) -> None:
    owner = create_token(session)[1]
    job = create_job(session, owner.project_id, **JOB)
    read = bearer(session, Scope.READ)
    assert client.get("/api/v1/jobs", headers=read).status_code == 200
    assert client.get(f"/api/v1/jobs/{job.id}", headers=read).status_code == 200
    assert client.get(f"/api/v1/jobs/{job.id}/logs", headers=read).status_code == 200
    assert client.get("/api/v1/nodes", headers=read).status_code == 200
    assert client.get("/api/v1/schedules", headers=read).status_code == 200
    assert_forbidden(client.post("/api/v1/jobs", json=JOB, headers=read), "submit")
    assert_forbidden(client.post(f"/api/v1/jobs/{job.id}/cancel", headers=read), "submit")
    assert_forbidden(client.post("/api/v1/sweeps", json={}, headers=read), "submit")
    assert_forbidden(client.put("/api/v1/data/a.csv", content=b"x", headers=read), "submit")
    assert_forbidden(
        client.put("/api/v1/bundles/sha256:" + "0" * 64, content=b"x", headers=read), "submit"
    )
    assert_forbidden(client.post("/api/v1/schedules", json=SCHEDULE, headers=read), "schedules")
    assert_forbidden(client.get("/api/v1/tokens", headers=read), "admin")
    assert client.get(f"/api/v1/jobs/{job.id}", headers=read).json()["status"] == "queued"


def test_a_submit_token_submits_and_cancels_but_reads_nothing_else(
    client: TestClient, session: Session
) -> None:
    submit = bearer(session, Scope.SUBMIT)
    created = client.post("/api/v1/jobs", json=JOB, headers=submit)
    assert created.status_code == 201
    job_id = created.json()["id"]
    assert client.post(f"/api/v1/jobs/{job_id}/cancel", headers=submit).status_code == 200
    # `cohort job submit --code` asks whether the bundle is there before uploading it.
    assert client.head("/api/v1/bundles/sha256:" + "0" * 64, headers=submit).status_code == 404
    assert_forbidden(client.get("/api/v1/jobs", headers=submit), "read")
    assert_forbidden(client.get(f"/api/v1/jobs/{job_id}", headers=submit), "read")
    # Streams: tests/streams/test_stream_scopes.py (they read committed tokens only).
    assert_forbidden(client.post("/api/v1/schedules", json=SCHEDULE, headers=submit), "schedules")
    assert_forbidden(
        client.post("/api/v1/tokens", headers=submit, json={"name": "x", "scopes": ["admin"]}),
        "admin",
    )
    assert_forbidden(client.delete("/api/v1/tokens/1", headers=submit), "admin")


def test_a_schedules_token_manages_schedules_and_submits_no_job(
    client: TestClient, session: Session
) -> None:
    schedules = bearer(session, Scope.SCHEDULES, Scope.READ)
    created = client.post("/api/v1/schedules", json=SCHEDULE, headers=schedules)
    assert created.status_code == 201, created.text
    schedule_id = created.json()["id"]
    assert (
        client.post(f"/api/v1/schedules/{schedule_id}/pause", headers=schedules).status_code == 200
    )
    assert client.delete(f"/api/v1/schedules/{schedule_id}", headers=schedules).status_code == 204
    assert_forbidden(client.post("/api/v1/jobs", json=JOB, headers=schedules), "submit")


def test_admin_holds_every_scope(client: TestClient, session: Session) -> None:
    admin = bearer(session, Scope.ADMIN)
    assert client.post("/api/v1/jobs", json=JOB, headers=admin).status_code == 201
    assert client.get("/api/v1/jobs", headers=admin).status_code == 200
    assert client.post("/api/v1/schedules", json=SCHEDULE, headers=admin).status_code == 201
    assert client.get("/api/v1/tokens", headers=admin).status_code == 200


def test_the_scope_is_checked_before_the_body_is_read_or_the_job_looked_up(
    client: TestClient, session: Session
) -> None:
    read = bearer(session, Scope.READ)
    # An invalid body, a job that does not exist: still 403, not 422 or 404.
    assert_forbidden(client.post("/api/v1/jobs", json={"replicas": -1}, headers=read), "submit")
    assert_forbidden(client.post("/api/v1/jobs/999999/cancel", headers=read), "submit")


def login(client: TestClient, token: str) -> Any:
    return client.post("/login", data={"token": token, "next": "/"}, follow_redirects=False)


def test_the_dashboard_needs_read_and_its_actions_their_own_scope(
    client: TestClient, session: Session
) -> None:
    submit_only, _ = create_token(session, "default", (Scope.SUBMIT,))
    refused = login(client, submit_only)
    assert refused.status_code == 403 and "set-cookie" not in refused.headers
    assert "lacks the &#39;read&#39; scope" in refused.text

    reader, row = create_token(session, "default", (Scope.READ,))
    job = create_job(session, row.project_id, **JOB)
    assert login(client, reader).status_code == 303
    page = client.get(f"/jobs/{job.id}")
    assert page.status_code == 200
    # What it may not do is shown disabled, not offered.
    assert re.search(r'id="cancel-btn"[^>]*disabled', page.text)
    assert re.search(r'id="resubmit-btn"[^>]*disabled', page.text)
    jobs_page = client.get("/").text
    assert "lacks the <code>submit</code> scope" in jobs_page
    assert '<fieldset class="plain" disabled>' in jobs_page
    assert client.get("/partials/jobs").status_code == 200
    # The page's cancel and submit buttons call REST v1 with the cookie: same check.
    assert_forbidden(client.post(f"/api/v1/jobs/{job.id}/cancel"), "submit")
    assert_forbidden(client.post("/api/v1/jobs", json=JOB), "submit")
