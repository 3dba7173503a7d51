"""`POST /api/v1/nodes/{id}/drain` and `/undrain`: admins only, a 404 naming an unknown
node, idempotent, and the cordon shown by the nodes listing."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from services.auth.scopes import Scope
from services.cluster.nodes import Heartbeat, record_heartbeat
from services.models import Node, utcnow
from tests.factories import create_token


@pytest.fixture
def admin(session: Session) -> dict[str, str]:
    return {"Authorization": f"Bearer {create_token(session, 'default', (Scope.ADMIN,))[0]}"}


def _node(client: TestClient, auth: dict[str, str], node_id: str) -> dict[str, object]:
    return next(n for n in client.get("/api/v1/nodes", headers=auth).json() if n["id"] == node_id)


def test_a_drain_cordons_the_node_once_and_an_undrain_lifts_it(
    client: TestClient, admin: dict[str, str], session: Session
) -> None:
    record_heartbeat(session=session, beat=Heartbeat("d7", "10.0.0.7", 2, 0, utcnow()))
    first = client.post(
        "/api/v1/nodes/d7/drain", json={"reason": "kernel upgrade"}, headers=admin
    ).json()
    assert first["cordon"] == "drain"
    assert first["cordon_reason"].startswith("kernel upgrade (by ")
    assert first["cordoned_at"] is not None
    assert _node(client, admin, "d7")["cordon"] == "drain"
    # Again, with another reason: nothing changes (the first drain's reason and time).
    again = client.post("/api/v1/nodes/d7/drain", json={"reason": "other"}, headers=admin)
    assert again.status_code == 200
    assert again.json()["cordon_reason"] == first["cordon_reason"]
    assert again.json()["cordoned_at"] == first["cordoned_at"]
    # No body: a reason of its own.
    record_heartbeat(session=session, beat=Heartbeat("d8", "10.0.0.8", 2, 0, utcnow()))
    bare = client.post("/api/v1/nodes/d8/drain", headers=admin).json()
    assert bare["cordon"] == "drain" and bare["cordon_reason"].startswith("drained (by ")

    lifted = client.post("/api/v1/nodes/d7/undrain", headers=admin)
    assert lifted.status_code == 200
    assert lifted.json()["cordon"] is None and lifted.json()["cordon_reason"] == ""
    assert client.post("/api/v1/nodes/d7/undrain", headers=admin).json()["cordon"] is None
    session.expire_all()
    assert session.get(Node, "d7").cordon is None  # type: ignore[union-attr]


def test_a_quarantine_is_lifted_by_undrain(
    client: TestClient, admin: dict[str, str], session: Session
) -> None:
    from services.statuses import NodeCordon

    record_heartbeat(session=session, beat=Heartbeat("q7", "10.0.0.9", 2, 0, utcnow()))
    node = session.get(Node, "q7")
    assert node is not None
    node.cordon, node.cordon_reason = NodeCordon.QUARANTINE, "replicas failed here"
    session.flush()
    assert _node(client, admin, "q7")["cordon"] == "quarantine"
    assert client.post("/api/v1/nodes/q7/undrain", headers=admin).json()["cordon"] is None


def test_an_unknown_node_is_a_404_naming_it(client: TestClient, admin: dict[str, str]) -> None:
    for verb in ("drain", "undrain"):
        answer = client.post(f"/api/v1/nodes/no-such-node/{verb}", headers=admin)
        assert answer.status_code == 404, answer.text
        assert "node 'no-such-node' not found" in answer.json()["message"]


def test_a_reason_too_long_is_a_422_naming_it(client: TestClient, admin: dict[str, str]) -> None:
    answer = client.post("/api/v1/nodes/x/drain", json={"reason": "x" * 301}, headers=admin)
    assert answer.status_code == 422, answer.text
    assert "reason" in answer.text


def test_only_admins_drain(client: TestClient, session: Session) -> None:
    record_heartbeat(session=session, beat=Heartbeat("r7", "10.0.0.10", 2, 0, utcnow()))
    for scopes in ((Scope.READ,), (Scope.SUBMIT,)):
        token = create_token(session, scopes=scopes)[0]
        headers = {"Authorization": f"Bearer {token}"}
        for verb in ("drain", "undrain"):
            answer = client.post(f"/api/v1/nodes/r7/{verb}", headers=headers)
            assert answer.status_code == 403, answer.text
            assert "lacks the 'admin' scope" in answer.json()["message"]
    assert session.get(Node, "r7").cordon is None  # type: ignore[union-attr]
    assert client.post("/api/v1/nodes/r7/drain").status_code == 401
