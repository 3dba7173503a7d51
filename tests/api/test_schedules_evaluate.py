"""A schedule's `evaluate:` block through the REST API: stored and shown, 422 naming the
field for each bad block (nothing stored), cleared or re-checked by an update; another
project's holdout is "nothing there"."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from services.models import Schedule
from tests.factories import create_token

JOB: dict[str, Any] = {"trainer": "mlp_digits", "strategy": "one_device", "replicas": 1}
COMMAND_JOB: dict[str, Any] = {
    "command": ["python", "train.py"],
    "strategy": "one_device",
    "replicas": 1,
}
EVALUATE = {"data": "data/holdout", "metric": "accuracy", "mode": "max"}
SWEEP: dict[str, Any] = {
    "name": "lr",
    "template": JOB,
    "space": {"grid": {"learning_rate": [0.1, 0.01]}},
    "objective": {"metric": "eval_accuracy", "mode": "max"},
}
BODY: dict[str, Any] = {"name": "judged", "job": JOB, "cron": "0 3 * * *", "evaluate": EVALUATE}


def stored(session: Session) -> int:
    return session.execute(sa.select(sa.func.count()).select_from(Schedule)).scalar_one()


def upload_holdout(client: TestClient, auth: dict[str, str]) -> None:
    response = client.put("/api/v1/data/holdout/part-0.csv", content=b"0,1\n", headers=auth)
    assert response.status_code == 201, response.text


def test_an_evaluated_schedule_is_stored_and_shown(
    client: TestClient, auth: dict[str, str]
) -> None:
    upload_holdout(client, auth)
    response = client.post("/api/v1/schedules", json=BODY, headers=auth)
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["evaluate"] == {**EVALUATE, "command": None}
    # An evaluation implies promotion, on its own metric and mode.
    # Promotion on the evaluation's metric, to the registry's default model and alias.
    judged = {"metric": "accuracy", "mode": "max", "model": None, "alias": "production"}
    assert body["promote"] == judged
    shown = client.get(f"/api/v1/schedules/{body['id']}", headers=auth).json()
    assert shown["evaluate"]["data"] == "data/holdout" and shown["recent_runs"] == []
    # While it evaluates, the evaluation's metric and mode are the promotion's.
    url = f"/api/v1/schedules/{body['id']}"
    patched = client.patch(url, json={"promote": {"metric": "loss", "mode": "min"}}, headers=auth)
    assert patched.json()["promote"] == judged
    assert client.patch(url, json={"promote": None}, headers=auth).json()["promote"] is not None
    cleared = client.patch(url, json={"evaluate": None}, headers=auth)
    assert cleared.status_code == 200 and cleared.json()["evaluate"] is None


@pytest.mark.parametrize(
    ("patch", "field", "words"),
    [
        ({"evaluate": {**EVALUATE, "data": "holdout"}}, "evaluate.data", "data/<path>"),
        ({"evaluate": {**EVALUATE, "data": "data/../x"}}, "evaluate.data", ""),
        ({"evaluate": {**EVALUATE, "data": "data/nothing-here"}}, "evaluate.data", "upload"),
        ({"evaluate": {**EVALUATE, "metric": "acc uracy"}}, "evaluate.metric", "metric name"),
        ({"evaluate": {**EVALUATE, "mode": "best"}}, "evaluate.mode", "max"),
        ({"evaluate": {"data": "data/holdout"}}, "evaluate.metric", "required"),
        ({"evaluate": {**EVALUATE, "unknown": 1}}, "evaluate.unknown", ""),
        ({"evaluate": {**EVALUATE, "command": []}}, "evaluate.command", ""),
        (
            {"evaluate": {**EVALUATE, "command": ["python", "e.py"]}},
            "evaluate.command",
            "evaluate(ctx)",
        ),
        ({"job": COMMAND_JOB}, "evaluate.command", "COHORT_HOLDOUT_DIR"),
        (
            {"job": None, "sweep": SWEEP},
            "evaluate",
            "sweep",
        ),
    ],
)
def test_bad_evaluate_blocks_get_422_naming_the_field(
    client: TestClient,
    auth: dict[str, str],
    session: Session,
    patch: dict[str, Any],
    field: str,
    words: str,
) -> None:
    upload_holdout(client, auth)
    response = client.post("/api/v1/schedules", json={**BODY, **patch}, headers=auth)
    assert response.status_code == 422, response.text
    fields = {f["field"]: f["message"] for f in response.json()["fields"]}
    assert field in fields, fields
    assert words in fields[field], fields
    assert stored(session) == 0


def test_another_projects_holdout_is_not_there(
    client: TestClient, auth: dict[str, str], session: Session
) -> None:
    other, _ = create_token(session, project="elsewhere")
    upload_holdout(client, {"Authorization": f"Bearer {other}"})
    response = client.post("/api/v1/schedules", json=BODY, headers=auth)
    assert response.status_code == 422, response.text
    assert stored(session) == 0


def test_an_update_checks_the_stored_block_against_a_new_job(
    client: TestClient, auth: dict[str, str]
) -> None:
    upload_holdout(client, auth)
    created = client.post("/api/v1/schedules", json=BODY, headers=auth).json()
    url = f"/api/v1/schedules/{created['id']}"
    response = client.patch(url, json={"job": COMMAND_JOB}, headers=auth)
    assert response.status_code == 422, response.text
    assert {f["field"] for f in response.json()["fields"]} == {"evaluate.command"}
    both = {"job": COMMAND_JOB, "evaluate": {**EVALUATE, "command": ["python", "evaluate.py"]}}
    response = client.patch(url, json=both, headers=auth)
    assert response.status_code == 200, response.text
    assert response.json()["evaluate"]["command"] == ["python", "evaluate.py"]
