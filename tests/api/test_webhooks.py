"""Webhooks over REST: admin tokens only; an unknown event or a URL the cluster may not
send to (server-side request forgery) is a 422 naming the field, nothing stored; the
secret is in the creation's answer alone; another project's webhooks are not found and
never listed."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from services.models import Webhook
from services.settings import get_settings
from tests.api.test_quotas import admin
from tests.factories import create_token

HOOK = {"url": "http://127.0.0.1:9/hook", "events": ["job.succeeded", "sweep.ended"]}


@pytest.fixture
def loopback_allowed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The tests' receivers listen on 127.0.0.1, allowed as a cluster's admin allows it."""
    monkeypatch.setenv("COHORT_WEBHOOK_ALLOWED_NETWORKS", "127.0.0.1/32")
    get_settings.cache_clear()
    yield
    monkeypatch.delenv("COHORT_WEBHOOK_ALLOWED_NETWORKS")
    get_settings.cache_clear()


def project_admin(session: Session) -> dict[str, str]:
    name = f"hooks-{uuid.uuid4().hex[:8]}"
    create_token(session, name)
    return admin(session, name)


def stored(session: Session) -> int:
    return session.execute(sa.select(sa.func.count()).select_from(Webhook)).scalar_one()


def test_only_an_admin_manages_webhooks(
    client: TestClient, auth: dict[str, str], session: Session
) -> None:
    for method, path, body in (
        ("POST", "/api/v1/webhooks", HOOK),
        ("GET", "/api/v1/webhooks", None),
        ("GET", "/api/v1/webhooks/1", None),
        ("DELETE", "/api/v1/webhooks/1", None),
        ("POST", "/api/v1/webhooks/1/ping", None),
        ("GET", "/api/v1/webhooks/1/deliveries", None),
    ):
        refused = client.request(method, path, json=body, headers=auth)
        assert refused.status_code == 403, (method, path, refused.text)
        assert "admin" in refused.json()["message"]
        assert client.request(method, path, json=body).status_code == 401
    assert stored(session) == 0


@pytest.mark.usefixtures("loopback_allowed")
def test_an_unknown_event_names_the_field_and_the_valid_names(
    client: TestClient, session: Session
) -> None:
    headers = project_admin(session)
    for events, field in ((["job.done"], "events.0"), ([], "events")):
        answer = client.post("/api/v1/webhooks", json={**HOOK, "events": events}, headers=headers)
        assert answer.status_code == 422, answer.text
        [problem] = answer.json()["fields"]
        assert problem["field"] == field, answer.text
    listed = client.post(
        "/api/v1/webhooks", json={**HOOK, "events": ["job.done"]}, headers=headers
    ).json()["fields"][0]["message"]
    for name in ("job.succeeded", "job.failed", "sweep.ended", "model.alias_moved"):
        assert name in listed
    assert stored(session) == 0


SSRF = [
    "http://169.254.169.254/latest/meta-data/",
    "http://10.0.0.1/hook",
    "http://[::1]/hook",
    "http://[::ffff:127.0.0.1]/hook",
    "http://2130706433/hook",
    "http://0x7f.1/hook",
    "http://localhost./hook",
    "http://127.0.0.1:9/hook",  # not allowed here: no COHORT_WEBHOOK_ALLOWED_NETWORKS
    "http://user:secret@example.com/hook",
    "file:///etc/passwd",
]


@pytest.mark.parametrize("url", SSRF)
def test_a_target_inside_the_network_is_refused_naming_url(
    url: str, client: TestClient, session: Session
) -> None:
    headers = project_admin(session)
    answer = client.post("/api/v1/webhooks", json={**HOOK, "url": url}, headers=headers)
    assert answer.status_code == 422, answer.text
    [problem] = answer.json()["fields"]
    assert problem["field"] == "url"
    assert stored(session) == 0


@pytest.mark.usefixtures("loopback_allowed")
def test_the_secret_is_shown_once_and_another_project_never_sees_the_webhook(
    client: TestClient, session: Session
) -> None:
    mine, theirs = project_admin(session), project_admin(session)
    created = client.post("/api/v1/webhooks", json=HOOK, headers=mine)
    assert created.status_code == 201, created.text
    hook = created.json()
    assert hook["secret"].startswith("whsec_") and len(hook["secret"]) == 70
    assert hook["events"] == ["job.succeeded", "sweep.ended"]
    path = f"/api/v1/webhooks/{hook['id']}"
    read = client.get(path, headers=mine).json()
    assert "secret" not in read and read["pending"] == read["failed"] == 0
    assert [h["id"] for h in client.get("/api/v1/webhooks", headers=mine).json()["items"]] == [
        hook["id"]
    ]
    assert "secret" not in client.get("/api/v1/webhooks", headers=mine).json()["items"][0]

    # Another project's admin: not listed, not found, cannot ping, read or delete it.
    assert client.get("/api/v1/webhooks", headers=theirs).json()["items"] == []
    for method, suffix in (("GET", ""), ("POST", "/ping"), ("GET", "/deliveries")):
        assert client.request(method, path + suffix, headers=theirs).status_code == 404
    assert client.delete(path, headers=theirs).status_code == 404
    assert session.get(Webhook, hook["id"]) is not None


@pytest.mark.usefixtures("loopback_allowed")
def test_a_ping_is_a_delivery_listed_with_its_attempts_until_deleted(
    client: TestClient, session: Session
) -> None:
    headers = project_admin(session)
    hook = client.post("/api/v1/webhooks", json=HOOK, headers=headers).json()
    path = f"/api/v1/webhooks/{hook['id']}"
    ping = client.post(f"{path}/ping", headers=headers)
    assert ping.status_code == 202, ping.text
    [listed] = client.get(f"{path}/deliveries", headers=headers).json()["items"]
    assert listed["id"] == ping.json()["id"] and listed["event"] == "ping"
    assert (listed["state"], listed["attempts"]) == ("pending", [])
    assert client.get(path, headers=headers).json()["pending"] == 1
    assert client.delete(path, headers=headers).status_code == 204
    assert client.get(path, headers=headers).status_code == 404
    assert client.get(f"{path}/deliveries", headers=headers).status_code == 404
