"""A cross-site page cannot ride the dashboard's cookie by adding an `Authorization`
header that authenticates nothing: whenever the cookie is what authenticates an unsafe
request, its Origin is checked (api/csrf.py, api/deps.py `bearer_token`)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from tests.api.test_dashboard import login
from tests.factories import create_job, create_token

EVIL = "https://evil.example"


@pytest.mark.parametrize(
    "authorization", ["Bearer", "Bearer ", "Bearer    ", "bearer", "Basic abc", "Token x", ""]
)
def test_a_cookie_request_with_an_authorization_that_authenticates_nothing_is_checked(
    client: TestClient, session: Session, authorization: str
) -> None:
    token, row = create_token(session, "victim")
    job = create_job(session, row.project_id, name="target", replicas=1)
    login(client, token)
    response = client.post(
        f"/api/v1/jobs/{job.id}/cancel", headers={"Origin": EVIL, "Authorization": authorization}
    )
    assert response.status_code == 403, response.text
    assert "cross-site request refused" in response.json()["message"]
    assert client.get(f"/api/v1/jobs/{job.id}").json()["status"] == "queued"


def test_a_real_bearer_beside_the_cookie_is_what_authenticates_and_is_not_checked(
    client: TestClient, session: Session
) -> None:
    # The bearer names another project than the cookie: the job of the bearer's project
    # is the one reachable, so the bearer, not the cookie, authenticated the request.
    cookie_token, _ = create_token(session, "browser")
    login(client, cookie_token)
    script_token, row = create_token(session, "script")
    job = create_job(session, row.project_id, name="scripted", replicas=1)
    response = client.post(
        f"/api/v1/jobs/{job.id}/cancel",
        headers={"Origin": EVIL, "Authorization": f"Bearer {script_token}"},
    )
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "cancelled"
