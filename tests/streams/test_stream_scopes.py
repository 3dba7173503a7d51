"""SSE streams check scopes and token state like every other route, from the short session
of their own they read the token in (so on committed tokens)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from services.auth.scopes import Scope


@pytest.fixture
def client(pg_url: str) -> Iterator[TestClient]:  # noqa: ARG001 - the test database
    from api.main import create_app

    yield TestClient(create_app())


def committed_token(*scopes: Scope) -> tuple[str, int]:
    from services.db import session_scope
    from tests.factories import create_token

    with session_scope() as session:
        token, row = create_token(session, "streams", scopes)
        return token, row.id


@pytest.mark.parametrize("path", ["/api/v1/jobs/1/stream", "/api/v1/stream"])
def test_a_token_without_read_gets_403_naming_it(client: TestClient, path: str) -> None:
    token, _ = committed_token(Scope.SUBMIT, Scope.SCHEDULES)
    response = client.get(path, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 403
    assert response.json()["error"] == "forbidden"
    assert "lacks the 'read' scope" in response.json()["message"]


def test_a_revoked_token_cannot_open_a_stream(client: TestClient) -> None:
    from services.auth import tokens
    from services.db import session_scope

    token, token_id = committed_token(Scope.READ)
    with session_scope() as session:
        tokens.revoke_token(session=session, token_id=token_id)
    response = client.get("/api/v1/stream", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 401 and "revoked" in response.json()["message"]
