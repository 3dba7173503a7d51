"""REST data triggers against PostgreSQL: the trigger and the content handled in the view,
the content there at creation handled (not another project's), removing the last way a
schedule fires refused."""

from __future__ import annotations

import hashlib
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from tests.api.test_schedules import JOB
from tests.factories import create_token

TRIGGER = {"data": "data/digits/", "settle_seconds": 5}


def create(client: TestClient, auth: dict[str, str], **body: Any) -> dict[str, Any]:
    response = client.post(
        "/api/v1/schedules", json={"name": "on-data", "job": JOB, **body}, headers=auth
    )
    assert response.status_code == 201, response.text
    return response.json()


def test_the_content_there_at_creation_is_handled(
    client: TestClient, auth: dict[str, str], session: Session, artifact_env: str
) -> None:
    del artifact_env
    other = {"Authorization": f"Bearer {create_token(session, 'other-data')[0]}"}
    client.put("/api/v1/data/digits/train.csv", content=b"theirs", headers=other)
    # Nothing of this project's there yet: nothing handled (the other project's is not seen).
    empty = create(client, auth, name="empty", trigger=TRIGGER)
    assert empty["trigger"] == {"data": "data/digits", "settle_seconds": 5}
    assert empty["data_version"] is None and empty["next_fire_at"] is None

    assert client.put("/api/v1/data/digits/train.csv", content=b"v1", headers=auth).status_code
    schedule = create(client, auth, trigger=TRIGGER)
    # One file under the prefix: the digest over its relative name and content.
    line = f"train.csv\0sha256:{hashlib.sha256(b'v1').hexdigest()}\n"
    assert schedule["data_version"] == "sha256:" + hashlib.sha256(line.encode()).hexdigest()
    assert schedule["data_version_at"] is not None
    shown = client.get(f"/api/v1/schedules/{schedule['id']}", headers=auth).json()
    assert shown["trigger"] == schedule["trigger"]
    assert shown["data_version"] == schedule["data_version"]


def test_a_schedule_keeps_a_way_to_fire(client: TestClient, auth: dict[str, str]) -> None:
    schedule = create(client, auth, trigger=TRIGGER)
    url = f"/api/v1/schedules/{schedule['id']}"
    refused = client.patch(url, json={"trigger": None}, headers=auth)
    assert refused.status_code == 422, refused.text
    assert refused.json()["fields"][0]["field"] == "trigger"
    assert client.get(url, headers=auth).json()["trigger"] is not None  # nothing half-stored
    both = client.patch(url, json={"cron": "0 3 * * *"}, headers=auth).json()
    assert both["next_fire_at"] is not None and both["trigger"] is not None
    timed = client.patch(url, json={"trigger": None}, headers=auth).json()
    assert timed["trigger"] is None and timed["data_version"] is None


def test_inputs_under_the_trigger_need_no_data_yet(
    client: TestClient, auth: dict[str, str], artifact_env: str
) -> None:
    del artifact_env
    job = {**JOB, "inputs": {"train.csv": "data/digits/train.csv"}}
    waiting = create(client, auth, job=job, trigger=TRIGGER)  # its first push starts it
    assert waiting["data_version"] is None
    elsewhere = {**JOB, "inputs": {"train.csv": "data/digits_x/train.csv"}}
    refused = client.post(
        "/api/v1/schedules",
        json={"name": "elsewhere", "job": elsewhere, "trigger": TRIGGER},
        headers=auth,
    )
    assert refused.status_code in (404, 422), refused.text
    assert "digits_x/train.csv" in refused.text
