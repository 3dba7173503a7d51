"""REST schedules API against PostgreSQL: CRUD, validation, pause/resume, trigger, model, auth."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from services.models import Job, Schedule
from tests.factories import create_token

JOB: dict[str, Any] = {
    "trainer": "mlp_digits",
    "strategy": "one_device",
    "replicas": 1,
    "hyperparameters": {"epochs": 1, "steps_per_epoch": 2},
}
BODY: dict[str, Any] = {
    "name": "nightly",
    "job": JOB,
    "cron": "0 3 * * *",
    "timezone": "Europe/Berlin",
    "concurrency_policy": "forbid",
    "starting_deadline_seconds": 600,
    "promote": {"metric": "eval_accuracy", "mode": "max"},
}


def count(session: Session, model: type) -> int:
    return session.execute(sa.select(sa.func.count()).select_from(model)).scalar_one()


def create(client: TestClient, auth: dict[str, str], **patch: Any) -> dict[str, Any]:
    response = client.post("/api/v1/schedules", json={**BODY, **patch}, headers=auth)
    assert response.status_code == 201, response.text
    return response.json()


def test_create_read_list_update_delete(
    client: TestClient, auth: dict[str, str], session: Session
) -> None:
    body = create(client, auth)
    assert body["cron"] == "0 3 * * *" and body["timezone"] == "Europe/Berlin"
    assert body["next_fire_at"].endswith(("01:00:00Z", "02:00:00Z"))  # 03:00 Berlin in UTC
    assert body["job"]["strategy"] == "one_device"
    # Promotions go to the registry: the schedule's name, alias `production` by default.
    assert body["promote"] == {
        "metric": "eval_accuracy",
        "mode": "max",
        "model": None,
        "alias": "production",
    }
    assert body["recent_runs"] == [] and body["last_outcome"] == ""

    url = f"/api/v1/schedules/{body['id']}"
    assert client.get(url, headers=auth).json()["name"] == "nightly"
    listed = client.get("/api/v1/schedules", headers=auth).json()["items"]
    assert [s["id"] for s in listed] == [body["id"]]

    patched = client.patch(
        url, json={"interval_seconds": 30, "starting_deadline_seconds": None}, headers=auth
    )
    assert patched.status_code == 200, patched.text
    assert patched.json()["cron"] is None and patched.json()["interval_seconds"] == 30
    assert patched.json()["starting_deadline_seconds"] is None

    assert client.delete(url, headers=auth).status_code == 204
    assert client.get(url, headers=auth).status_code == 404
    assert count(session, Schedule) == 0


@pytest.mark.parametrize(
    ("patch", "field", "words"),
    [
        ({"cron": "*/5 * *"}, "cron", "give 5"),
        ({"cron": "99 * * * *"}, "cron", "not valid"),
        ({"timezone": "Mars/Olympus"}, "timezone", "IANA"),
        ({"cron": None}, "body", "give 'cron', 'interval_seconds' or 'trigger'"),
        ({"interval_seconds": 10}, "body", "at most one of 'cron' and 'interval_seconds'"),
        ({"trigger": {"data": "digits"}}, "trigger.data", "'data/<path or prefix>'"),
        ({"trigger": {"data": "data/../x"}}, "trigger.data", ".."),
        ({"trigger": {"data": "data//x"}}, "trigger.data", "relative"),
        ({"trigger": {"data": "data/"}}, "trigger.data", "e.g. 'data/digits'"),
        ({"trigger": {"data": "data/d", "settle_seconds": -1}}, "trigger.settle_seconds", "0"),
        (
            {"trigger": {"data": "data/d", "settle_seconds": 10**6}},
            "trigger.settle_seconds",
            "86400",
        ),
        ({"trigger": {"data": "data/d", "when": "often"}}, "trigger.when", "not permitted"),
        ({"job": {**JOB, "env": {"COHORT_SCHEDULED_FOR": "x"}}}, "job.env", "reserved"),
        ({"concurrency_policy": "sometimes"}, "concurrency_policy", "allow"),
        ({"starting_deadline_seconds": 0}, "starting_deadline_seconds", "larger"),
        ({"name": "../etc"}, "name", "letter or digit"),
        ({"job": {**JOB, "replicas": 0}}, "job.replicas", "larger"),
        ({"job": {**JOB, "replicas": 2}}, "job.replicas", "runs one replica"),
        ({"promote": {"metric": "x;rm -rf", "mode": "max"}}, "promote.metric", "metric name"),
        ({"promote": {"metric": "eval_accuracy", "mode": "best"}}, "promote.mode", "max"),
        ({"promote": {"metric": "eval_accuracy", "model": "a b"}}, "promote.model", "letters"),
        ({"promote": {"metric": "eval_accuracy", "alias": "9x"}}, "promote.alias", "a letter"),
    ],
)
def test_bad_schedules_get_422_naming_the_field(
    client: TestClient,
    auth: dict[str, str],
    session: Session,
    patch: dict[str, Any],
    field: str,
    words: str,
) -> None:
    response = client.post("/api/v1/schedules", json={**BODY, **patch}, headers=auth)
    assert response.status_code == 422, response.text
    body = response.json()
    fields = {f["field"]: f["message"] for f in body["fields"]}
    assert field in fields, body
    assert words in fields[field], body
    assert count(session, Schedule) == 0


def test_duplicate_name_is_409(client: TestClient, auth: dict[str, str], session: Session) -> None:
    create(client, auth)
    response = client.post("/api/v1/schedules", json=BODY, headers=auth)
    assert response.status_code == 409
    assert "pick another name" in response.json()["message"]
    assert count(session, Schedule) == 1


def test_pause_resume_trigger_and_jobs_by_schedule(
    client: TestClient, auth: dict[str, str], session: Session
) -> None:
    body = create(client, auth, concurrency_policy="allow")
    url = f"/api/v1/schedules/{body['id']}"
    paused = client.post(f"{url}/pause", headers=auth).json()
    assert paused["paused"] is True and paused["next_fire_at"] is None
    resumed = client.post(f"{url}/resume", headers=auth).json()
    assert resumed["paused"] is False and resumed["next_fire_at"] is not None

    run = client.post(f"{url}/trigger", headers=auth)
    assert run.status_code == 201, run.text
    assert run.json()["outcome"] == "triggered" and run.json()["decision"] == "pending"
    job_id = run.json()["job_id"]
    job = client.get(f"/api/v1/jobs/{job_id}", headers=auth).json()
    assert job["schedule_id"] == body["id"] and job["name"].startswith("nightly-")
    client.post("/api/v1/jobs", json={**JOB, "name": "unrelated"}, headers=auth)
    listed = client.get("/api/v1/jobs", params={"schedule_id": body["id"]}, headers=auth)
    assert [j["id"] for j in listed.json()["items"]] == [job_id]
    assert count(session, Job) == 2

    shown = client.get(url, headers=auth).json()
    assert [r["job_id"] for r in shown["recent_runs"]] == [job_id]
    assert shown["last_outcome"] == "triggered"

    # Deleting the schedule keeps its jobs.
    client.delete(url, headers=auth)
    assert session.get(Job, job_id) is not None


def test_forbid_trigger_while_active_is_recorded_as_skipped(
    client: TestClient, auth: dict[str, str]
) -> None:
    body = create(client, auth)  # forbid
    url = f"/api/v1/schedules/{body['id']}/trigger"
    first = client.post(url, headers=auth).json()
    second = client.post(url, headers=auth).json()
    assert second["outcome"] == "skipped" and second["job_id"] is None
    assert f"job {first['job_id']} " in second["reason"]


def test_model_is_404_until_something_is_promoted(client: TestClient, auth: dict[str, str]) -> None:
    body = create(client, auth)
    response = client.get(f"/api/v1/schedules/{body['id']}/model", headers=auth)
    assert response.status_code == 404
    assert "no promoted model yet" in response.json()["message"]


def test_other_projects_schedules_are_404(
    client: TestClient, auth: dict[str, str], session: Session
) -> None:
    body = create(client, auth)
    other = {"Authorization": f"Bearer {create_token(session, 'other')[0]}"}
    url = f"/api/v1/schedules/{body['id']}"
    for method, path in (
        ("get", ""),
        ("patch", ""),
        ("delete", ""),
        ("post", "/pause"),
        ("post", "/trigger"),
        ("get", "/model"),
    ):
        kwargs: dict[str, Any] = {"json": {}} if method == "patch" else {}
        response = getattr(client, method)(url + path, headers=other, **kwargs)
        assert response.status_code == 404, (method, path, response.text)
    assert client.get("/api/v1/schedules", headers=other).json()["items"] == []
    assert client.get(url, headers=auth).json()["paused"] is False
    assert client.get("/api/v1/schedules").status_code == 401
