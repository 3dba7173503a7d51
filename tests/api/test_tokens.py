"""The token API (admins): issue with the secret shown once, list without secrets, revoke
(effective on the next request, dashboard sessions included); refused requests are 4xx
naming the field."""

from __future__ import annotations

import datetime as dt

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from services.auth.scopes import Scope
from tests.factories import create_token


@pytest.fixture
def admin(session: Session) -> dict[str, str]:
    return {"Authorization": f"Bearer {create_token(session, 'default', (Scope.ADMIN,))[0]}"}


def test_an_issued_token_is_shown_once_and_works_with_its_scopes(
    client: TestClient, admin: dict[str, str]
) -> None:
    response = client.post(
        "/api/v1/tokens",
        headers=admin,
        json={"project": "team-a", "name": "ci", "scopes": ["submit", "read", "read"]},
    )
    assert response.status_code == 201, response.text
    created = response.json()
    secret = created["token"]
    assert created["project"] == "team-a" and created["scopes"] == ["read", "submit"]
    assert created["state"] == "active" and created["expires_at"] is None
    assert len(secret) >= 40
    mine = {"Authorization": f"Bearer {secret}"}
    job = client.post(
        "/api/v1/jobs", headers=mine, json={"name": "j", "strategy": "one_device", "replicas": 1}
    )
    assert job.status_code == 201
    # Its project is its own: the admin's project does not see the job.
    assert client.get(f"/api/v1/jobs/{job.json()['id']}", headers=mine).status_code == 200

    listed = client.get("/api/v1/tokens?project=team-a", headers=admin)
    assert listed.status_code == 200
    assert secret not in listed.text and "token_hash" not in listed.text
    [item] = listed.json()["items"]
    assert item["id"] == created["id"] and item["name"] == "ci" and "token" not in item
    assert item["last_used_at"] is not None  # it was used above


def test_revoking_refuses_the_token_on_its_next_request(
    client: TestClient, admin: dict[str, str]
) -> None:
    created = client.post(
        "/api/v1/tokens", headers=admin, json={"name": "short-lived", "scopes": ["read"]}
    ).json()
    theirs = {"Authorization": f"Bearer {created['token']}"}
    assert client.get("/api/v1/jobs", headers=theirs).status_code == 200
    revoked = client.delete(f"/api/v1/tokens/{created['id']}", headers=admin)
    assert revoked.status_code == 200 and revoked.json()["state"] == "revoked"
    refused = client.get("/api/v1/jobs", headers=theirs)
    assert refused.status_code == 401
    assert refused.json()["error"] == "unauthorized"
    assert "'short-lived' was revoked" in refused.json()["message"]
    # Again: nothing changes, the first revocation time stays.
    again = client.delete(f"/api/v1/tokens/{created['id']}", headers=admin)
    assert again.json()["revoked_at"] == revoked.json()["revoked_at"]


def test_a_token_cannot_revoke_itself_another_admin_can(
    client: TestClient, admin: dict[str, str]
) -> None:
    second = client.post(
        "/api/v1/tokens", headers=admin, json={"name": "second-admin", "scopes": ["admin"]}
    ).json()
    theirs = {"Authorization": f"Bearer {second['token']}"}
    refused = client.delete(f"/api/v1/tokens/{second['id']}", headers=theirs)
    assert refused.status_code == 409, refused.text
    assert refused.json()["error"] == "conflict"
    assert "another admin token" in refused.json()["message"]
    assert client.get("/api/v1/jobs", headers=theirs).status_code == 200  # still valid
    assert client.delete(f"/api/v1/tokens/{second['id']}", headers=admin).status_code == 200
    assert client.get("/api/v1/jobs", headers=theirs).status_code == 401


def test_revoking_a_token_ends_its_dashboard_sessions(
    client: TestClient, admin: dict[str, str]
) -> None:
    created = client.post(
        "/api/v1/tokens", headers=admin, json={"name": "browser", "scopes": ["read"]}
    ).json()
    assert (
        client.post("/login", data={"token": created["token"]}, follow_redirects=False).status_code
        == 303
    )
    session_cookie = client.cookies.get("cohort_session")
    assert session_cookie and created["token"] not in session_cookie
    assert client.get("/", follow_redirects=False).status_code == 200
    client.cookies.clear()
    assert client.delete(f"/api/v1/tokens/{created['id']}", headers=admin).status_code == 200
    client.cookies.set("cohort_session", session_cookie)
    assert client.get("/", follow_redirects=False).status_code == 303
    assert client.get("/api/v1/jobs").status_code == 401


def test_expiry_is_set_from_expires_in_or_expires_at(
    client: TestClient, admin: dict[str, str]
) -> None:
    before = dt.datetime.now(dt.UTC)
    created = client.post(
        "/api/v1/tokens",
        headers=admin,
        json={"name": "day", "scopes": ["read"], "expires_in": 86400},
    ).json()
    expires = dt.datetime.fromisoformat(created["expires_at"])
    assert before + dt.timedelta(days=1) <= expires <= before + dt.timedelta(days=1, minutes=1)
    at = (before + dt.timedelta(days=7)).replace(microsecond=0)
    created = client.post(
        "/api/v1/tokens",
        headers=admin,
        json={"name": "week", "scopes": ["read"], "expires_at": at.isoformat()},
    ).json()
    assert dt.datetime.fromisoformat(created["expires_at"]) == at


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "x", "scopes": []}, "scopes"),
        ({"name": "x", "scopes": ["root"]}, "scopes.0"),
        ({"name": "x"}, "scopes"),
        ({"name": "../x", "scopes": ["read"]}, "name"),
        ({"name": "x", "project": "a b", "scopes": ["read"]}, "project"),
        ({"name": "x", "scopes": ["read"], "expires_in": 2**70}, "expires_in"),
        ({"name": "x", "scopes": ["read"], "expires_in": 0}, "expires_in"),
        ({"name": "x", "scopes": ["read"], "expires_at": "2001-01-01T00:00:00Z"}, "expires_at"),
        ({"name": "x", "scopes": ["read"], "expires_at": "2100-01-01T00:00:00"}, "expires_at"),
        (
            {
                "name": "x",
                "scopes": ["read"],
                "expires_in": 600,
                "expires_at": "2100-01-01T00:00:00Z",
            },
            "body",
        ),
        ({"name": "x", "scopes": ["read"], "admin": True}, "admin"),
    ],
)
def test_a_bad_token_request_is_a_422_naming_the_field_and_stores_nothing(
    client: TestClient, admin: dict[str, str], body: dict[str, object], field: str
) -> None:
    before = len(client.get("/api/v1/tokens", headers=admin).json()["items"])
    response = client.post("/api/v1/tokens", headers=admin, json=body)
    assert response.status_code == 422, response.text
    answer = response.json()
    assert answer["error"] == "invalid_request"
    assert answer["fields"][0]["field"] == field, answer
    assert len(client.get("/api/v1/tokens", headers=admin).json()["items"]) == before


@pytest.mark.parametrize(("token_id", "status"), [(999_999, 404), (0, 422), (2**64, 422)])
def test_revoking_a_token_that_is_not_there(
    client: TestClient, admin: dict[str, str], token_id: int, status: int
) -> None:
    response = client.delete(f"/api/v1/tokens/{token_id}", headers=admin)
    assert response.status_code == status, response.text
    if status == 404:
        assert response.json()["message"] == f"token {token_id} not found"


def test_any_token_reads_its_own_project_and_scopes_without_its_secret(
    client: TestClient, session: Session
) -> None:
    secret, _row = create_token(session, "team-b", (Scope.READ,))
    response = client.get("/api/v1/whoami", headers={"Authorization": f"Bearer {secret}"})
    assert response.status_code == 200, response.text
    mine = response.json()
    assert mine["project"] == "team-b" and mine["scopes"] == ["read"]
    assert mine["state"] == "active" and secret not in response.text
    assert client.get("/api/v1/whoami").status_code == 401
