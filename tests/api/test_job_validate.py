"""Checking a spec without submitting it (`POST /api/v1/validate/job`), and the field a
misspelt one was meant to be, at every level of jobs, sweeps and schedules."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from services.models import Bundle, Job, JobEvent, Schedule, Sweep

JOB: dict[str, Any] = {
    "name": "script",
    "command": ["python", "train.py"],
    "strategy": "one_device",
    "replicas": 1,
}
PENDING = "sha256:" + "0" * 64
SWEEP: dict[str, Any] = {
    "template": {"trainer": "mlp_digits", "strategy": "one_device", "replicas": 1},
    "space": {"random": {"learning_rate": {"distribution": "uniform", "low": 0.1, "high": 1}}},
    "trials": 2,
    "objective": {"metric": "eval_accuracy", "mode": "max"},
}
SCHEDULE: dict[str, Any] = {"name": "nightly", "cron": "0 3 * * *", "job": JOB}


def stored(session: Session) -> dict[str, int]:
    return {
        model.__tablename__: session.execute(
            sa.select(sa.func.count()).select_from(model)
        ).scalar_one()
        for model in (Job, JobEvent, Bundle, Sweep, Schedule)
    }


def test_a_valid_spec_answers_the_spec_as_stored_and_stores_nothing(
    client: TestClient, auth: dict[str, str], session: Session
) -> None:
    before = stored(session)
    response = client.post("/api/v1/validate/job", json=JOB, headers=auth)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["command"] == ["python", "train.py"] and body["trainer"] is None
    assert body["hyperparameters"]["epochs"] == 5  # defaults filled in
    assert "id" not in body and "status" not in body
    assert stored(session) == before


def test_a_bundle_not_uploaded_yet_passes_only_when_pending(
    client: TestClient, auth: dict[str, str], session: Session
) -> None:
    spec = {**JOB, "bundle": PENDING}
    refused = client.post("/api/v1/validate/job", json=spec, headers=auth)
    assert refused.status_code == 404, refused.text
    pending = client.post(
        "/api/v1/validate/job", params={"bundle_pending": "true"}, json=spec, headers=auth
    )
    assert pending.status_code == 200, pending.text
    assert pending.json()["bundle"] == PENDING
    assert set(stored(session).values()) == {0}


@pytest.mark.parametrize(
    ("patch", "field", "words"),
    [
        ({"replicas": 2}, "replicas", "set replicas to 1"),  # one_device: the strategy's rule
        ({"replicas": 65}, "replicas", "at most 64 replicas"),  # a setting's
        ({"trainer": "mlp_digits"}, "body", "give either `trainer` or `command`"),
    ],
)
def test_a_refused_spec_gets_the_submissions_422_and_nothing_is_stored(
    client: TestClient,
    auth: dict[str, str],
    session: Session,
    patch: dict[str, Any],
    field: str,
    words: str,
) -> None:
    spec = {**JOB, **patch}
    checked = client.post("/api/v1/validate/job", json=spec, headers=auth)
    submitted = client.post("/api/v1/jobs", json=spec, headers=auth)
    assert checked.status_code == submitted.status_code == 422, checked.text
    assert checked.json() == submitted.json()
    assert any(f["field"] == field for f in checked.json()["fields"]), checked.json()
    assert words in checked.json()["message"]
    assert set(stored(session).values()) == {0}


@pytest.mark.parametrize(
    ("path", "body", "field", "near"),
    [
        ("/api/v1/jobs", {**JOB, "replica": 2}, "replica", "replicas"),
        ("/api/v1/validate/job", {**JOB, "replica": 2}, "replica", "replicas"),
        ("/api/v1/jobs", {**JOB, "restart_polcy": "never"}, "restart_polcy", "restart_policy"),
        (
            "/api/v1/jobs",
            {**JOB, "distribution": {"comunication": "ring"}},
            "distribution.comunication",
            "communication",
        ),
        (
            "/api/v1/jobs",
            {
                **JOB,
                "strategy": "parameter_server",
                "roles": {"chief": 1, "worker": 1, "ps": 1, "evaluater": 0},
            },
            "roles.evaluater",
            "evaluator",
        ),
        ("/api/v1/sweeps", {**SWEEP, "objectve": {}}, "objectve", "objective"),
        (
            "/api/v1/sweeps",
            {**SWEEP, "template": {**SWEEP["template"], "prority": 1}},
            "template.prority",
            "priority",
        ),
        (
            "/api/v1/sweeps",
            {
                **SWEEP,
                "space": {
                    "random": {
                        "learning_rate": {
                            "distribution": "uniform",
                            "low": 0.1,
                            "high": 1,
                            "hihg": 2,
                        }
                    }
                },
            },
            "space.random.learning_rate.uniform.hihg",
            "high",
        ),
        ("/api/v1/schedules", {**SCHEDULE, "timezon": "UTC"}, "timezon", "timezone"),
        (
            "/api/v1/schedules",
            {**SCHEDULE, "job": {**JOB, "max_restart": 1}},
            "job.max_restart",
            "max_restarts",
        ),
    ],
)
def test_an_unknown_field_names_the_closest_declared_one(
    client: TestClient,
    auth: dict[str, str],
    session: Session,
    path: str,
    body: dict[str, Any],
    field: str,
    near: str,
) -> None:
    response = client.post(path, json=body, headers=auth)
    assert response.status_code == 422, response.text
    unknown = field.rsplit(".", 1)[-1]
    expected = {"field": field, "message": f"unknown field `{unknown}`: did you mean `{near}`?"}
    assert expected in response.json()["fields"], response.json()
    assert f"did you mean `{near}`?" in response.json()["message"]
    assert set(stored(session).values()) == {0}


def test_an_unknown_field_like_none_declared_says_remove_it(
    client: TestClient, auth: dict[str, str]
) -> None:
    response = client.post("/api/v1/jobs", json={**JOB, "colour": "blue"}, headers=auth)
    assert response.status_code == 422
    (problem,) = response.json()["fields"]
    assert problem["field"] == "colour"
    assert "did you mean" not in problem["message"]
    assert "remove this field" in problem["message"]
