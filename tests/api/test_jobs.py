"""REST jobs API against PostgreSQL: submit, idempotency, validation, auth, listing, cancel."""

from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from services.models import Job, JobEvent
from tests.factories import create_token

SPEC: dict[str, Any] = {
    "name": "digits",
    "trainer": "mlp_digits",
    "replicas": 2,
    "hyperparameters": {"epochs": 2, "steps_per_epoch": 5},
}


def count_jobs(session: Session) -> int:
    return session.execute(sa.select(sa.func.count()).select_from(Job)).scalar_one()


def test_submit_returns_committed_job(
    client: TestClient, auth: dict[str, str], session: Session
) -> None:
    response = client.post("/api/v1/jobs", json=SPEC, headers=auth)
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["status"] == "queued"
    assert body["attempt"] == 1
    assert body["replicas"] == 2
    assert body["project"] == "default"
    assert body["hyperparameters"] == {
        "epochs": 2,
        "steps_per_epoch": 5,
        "batch_size": 32,
        "learning_rate": 0.01,
    }
    job = session.get(Job, body["id"])
    assert job is not None and job.name == "digits"
    events = session.execute(sa.select(JobEvent).where(JobEvent.job_id == job.id)).scalars()
    assert [e.to_status for e in events] == ["queued"]


def test_idempotency_key_returns_first_job(
    client: TestClient, auth: dict[str, str], session: Session
) -> None:
    headers = {**auth, "Idempotency-Key": "key-1"}
    first = client.post("/api/v1/jobs", json=SPEC, headers=headers)
    second = client.post("/api/v1/jobs", json=SPEC, headers=headers)
    assert first.status_code == second.status_code == 201
    assert first.json()["id"] == second.json()["id"]
    assert second.headers["Idempotent-Replayed"] == "true"
    assert count_jobs(session) == 1


def test_idempotency_key_with_other_spec_conflicts(
    client: TestClient, auth: dict[str, str], session: Session
) -> None:
    headers = {**auth, "Idempotency-Key": "key-2"}
    assert client.post("/api/v1/jobs", json=SPEC, headers=headers).status_code == 201
    response = client.post("/api/v1/jobs", json={**SPEC, "replicas": 3}, headers=headers)
    assert response.status_code == 409
    assert "different spec" in response.json()["message"]
    assert count_jobs(session) == 1


@pytest.mark.parametrize(
    ("patch", "field", "words"),
    [
        (
            {"trainer": "resnet_imagenet"},
            "trainer",
            "built-in trainers are: cnn_digits, mlp_digits",
        ),
        ({"trainer": "evil.module:run"}, "trainer", "COHORT_ALLOWED_ENTRYPOINTS"),
        ({"trainer": "rm -rf /"}, "trainer", "built-in trainer name"),
        ({"strategy": "horovod"}, "strategy", "'multi_worker_mirrored'"),
        ({"replicas": 0}, "replicas", "greater than or equal to 1"),
        ({"replicas": 65}, "replicas", "at most 64 replicas"),
        ({"strategy": "one_device", "replicas": 2}, "replicas", "set replicas to 1"),
        ({"hyperparameters": {"epochs": "ten"}}, "hyperparameters.epochs", "valid integer"),
        ({"hyperparameters": {"learning_rate": "fast"}}, "hyperparameters.learning_rate", "number"),
        ({"hyperparameters": {"bad name": 1}}, "hyperparameters", "must be an identifier"),
        (
            {"hyperparameters": {"table": "x" * 300_000}},
            "hyperparameters",
            "COHORT_MAX_HYPERPARAMETERS_BYTES",
        ),
        ({"gpus": 1}, "gpus", "did you mean `gpus_per_replica`?"),
        ({"colour": "blue"}, "colour", "remove this field"),
    ],
)
def test_bad_spec_is_422_naming_the_field(
    client: TestClient,
    auth: dict[str, str],
    session: Session,
    patch: dict[str, Any],
    field: str,
    words: str,
) -> None:
    response = client.post("/api/v1/jobs", json={**SPEC, **patch}, headers=auth)
    assert response.status_code == 422, response.text
    body = response.json()
    assert any(f["field"] == field for f in body["fields"]), body
    assert words in body["message"], body["message"]
    assert count_jobs(session) == 0


def test_allowed_entrypoint_is_accepted(
    client: TestClient, auth: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from services.settings import get_settings

    monkeypatch.setattr(get_settings(), "ALLOWED_ENTRYPOINTS", ["team.trainers:fit"])
    response = client.post(
        "/api/v1/jobs", json={**SPEC, "trainer": "team.trainers:fit"}, headers=auth
    )
    assert response.status_code == 201, response.text


def test_auth_required(client: TestClient) -> None:
    assert client.get("/api/v1/jobs").status_code == 401
    response = client.get("/api/v1/jobs", headers={"Authorization": "Bearer nope"})
    assert response.status_code == 401
    assert "unknown token" in response.json()["message"]
    assert client.post("/api/v1/jobs", json=SPEC).status_code == 401


def test_unknown_and_foreign_jobs_are_404(
    client: TestClient, auth: dict[str, str], session: Session
) -> None:
    assert client.get("/api/v1/jobs/999999", headers=auth).status_code == 404
    other, _ = create_token(session, "other")
    job_id = client.post(
        "/api/v1/jobs", json=SPEC, headers={"Authorization": f"Bearer {other}"}
    ).json()["id"]
    assert client.get(f"/api/v1/jobs/{job_id}", headers=auth).status_code == 404
    assert client.post(f"/api/v1/jobs/{job_id}/cancel", headers=auth).status_code == 404
    assert client.get(f"/api/v1/jobs/{job_id}/metrics", headers=auth).status_code == 404
    assert client.get("/api/v1/jobs", headers=auth).json()["items"] == []


def test_list_with_cursor_and_status_filter(client: TestClient, auth: dict[str, str]) -> None:
    ids = [
        client.post("/api/v1/jobs", json={**SPEC, "name": f"j{i}"}, headers=auth).json()["id"]
        for i in range(5)
    ]
    client.post(f"/api/v1/jobs/{ids[0]}/cancel", headers=auth)
    seen, cursor = [], None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = client.get("/api/v1/jobs", params=params, headers=auth).json()
        seen += [item["id"] for item in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == sorted(ids, reverse=True)
    cancelled = client.get("/api/v1/jobs", params={"status": "cancelled"}, headers=auth).json()
    assert [item["id"] for item in cancelled["items"]] == [ids[0]]
    bad = client.get("/api/v1/jobs", params={"cursor": "garbage"}, headers=auth)
    assert bad.status_code == 422
    assert bad.json()["fields"][0]["field"] == "cursor"


def test_cancel(client: TestClient, auth: dict[str, str]) -> None:
    job_id = client.post("/api/v1/jobs", json=SPEC, headers=auth).json()["id"]
    response = client.post(f"/api/v1/jobs/{job_id}/cancel", headers=auth)
    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"
    again = client.post(f"/api/v1/jobs/{job_id}/cancel", headers=auth)
    assert again.status_code == 409
    assert "already finished" in again.json()["message"]
    events = client.get(f"/api/v1/jobs/{job_id}/events", headers=auth).json()
    assert [(e["to_status"], e["reason"]) for e in events] == [
        ("queued", "submitted"),
        ("cancelled", "cancelled by user"),
    ]
