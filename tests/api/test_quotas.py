"""Quotas over REST: an admin reads and sets them, everyone else gets 403; refusals say
what is used and what is allowed; a queued job's place is counted within its project."""

from __future__ import annotations

import secrets
import uuid

import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from services.auth import tokens
from services.models import Job, Project, Schedule
from services.settings import get_settings
from tests.factories import create_job, create_token

JOB = {"strategy": "one_device", "replicas": 1}


def admin(session: Session, project: str = "default") -> dict[str, str]:
    token = "adm_" + secrets.token_hex(8)
    tokens.ensure_token(
        session=session, token=token, project_name=project, name="admin", scopes=["admin"]
    )
    return {"Authorization": f"Bearer {token}"}


def fresh_project(session: Session) -> tuple[str, dict[str, str]]:
    """A project of its own, and a plain token of it."""
    name = f"quota-{uuid.uuid4().hex[:8]}"
    token, _ = create_token(session, name)
    return name, {"Authorization": f"Bearer {token}"}


def count(session: Session, model: type[Job] | type[Schedule], name: str) -> int:
    """How many jobs or schedules project `name` has."""
    return session.execute(
        sa.select(sa.func.count())
        .select_from(model)
        .join(Project, Project.id == model.project_id)
        .where(Project.name == name)
    ).scalar_one()


def test_only_an_admin_reads_or_sets_a_quota(client: TestClient, auth: dict[str, str]) -> None:
    for method, body in (("GET", None), ("PUT", {"max_gpus": 1})):
        response = client.request(method, "/api/v1/projects/default/quota", json=body, headers=auth)
        assert response.status_code == 403, response.text
        assert response.json()["error"] == "forbidden"
    assert client.get("/api/v1/projects/default/quota").status_code == 401


def test_an_admin_sets_a_projects_limits_over_the_defaults(
    client: TestClient, session: Session
) -> None:
    name, _ = fresh_project(session)
    headers = admin(session)
    before = client.get(f"/api/v1/projects/{name}/quota", headers=headers).json()
    settings = get_settings()
    assert before["defaults"]["max_queued_jobs"] == settings.QUOTA_MAX_QUEUED_JOBS
    assert before["limits"] == before["defaults"]
    assert set(before["overrides"].values()) == {None}
    assert before["used"] == {"queued_jobs": 0, "running_replicas": 0, "gpus": 0, "schedules": 0}
    response = client.put(
        f"/api/v1/projects/{name}/quota", headers=headers, json={"max_gpus": 8, "max_priority": 50}
    )
    assert response.status_code == 200, response.text
    after = response.json()
    assert after["limits"]["max_gpus"] == 8 and after["limits"]["max_priority"] == 50
    assert after["overrides"]["max_queued_jobs"] is None  # left out: the default again
    assert after["limits"]["max_queued_jobs"] == settings.QUOTA_MAX_QUEUED_JOBS
    assert client.get(f"/api/v1/projects/{name}/quota", headers=headers).json() == after


def test_bad_quota_requests_name_the_field(client: TestClient, session: Session) -> None:
    headers = admin(session)
    for body, field in (
        ({"max_gpus": -1}, "max_gpus"),
        ({"max_gpu": 3}, "max_gpu"),
        ({"max_priority": 5000}, "max_priority"),
    ):
        response = client.put("/api/v1/projects/default/quota", json=body, headers=headers)
        assert response.status_code == 422, response.text
        assert [f["field"] for f in response.json()["fields"]] == [field]
    missing = client.get("/api/v1/projects/no-such-project/quota", headers=headers)
    assert missing.status_code == 404 and "project no-such-project" in missing.json()["message"]


def test_the_job_past_the_queued_quota_gets_429_saying_what_is_used_and_allowed(
    client: TestClient, session: Session
) -> None:
    name, headers = fresh_project(session)
    client.put(
        f"/api/v1/projects/{name}/quota", json={"max_queued_jobs": 2}, headers=admin(session)
    )
    for _ in range(2):
        assert client.post("/api/v1/jobs", json=JOB, headers=headers).status_code == 201
    response = client.post("/api/v1/jobs", json=JOB, headers=headers)
    assert response.status_code == 429, response.text
    body = response.json()
    assert body["error"] == "quota_exceeded"
    assert (body["quota"], body["used"], body["allowed"]) == ("max_queued_jobs", 2, 2)
    assert body["fields"][0]["field"] == "max_queued_jobs"
    assert body["message"].startswith("max_queued_jobs: project quota: 2 of 2 queued jobs")
    assert count(session, Job, name) == 2


def test_a_priority_above_the_ceiling_gets_403_naming_the_field(
    client: TestClient, session: Session
) -> None:
    name, headers = fresh_project(session)
    client.put(f"/api/v1/projects/{name}/quota", json={"max_priority": 0}, headers=admin(session))
    response = client.post("/api/v1/jobs", json={**JOB, "priority": 1000}, headers=headers)
    assert response.status_code == 403, response.text
    body = response.json()
    assert body["fields"] == [{"field": "priority", "message": body["fields"][0]["message"]}]
    assert "above this project's ceiling of 0" in body["message"]
    assert (body["quota"], body["used"], body["allowed"]) == ("max_priority", 1000, 0)
    assert count(session, Job, name) == 0
    # The same ceiling guards schedules' templates.
    schedule = {"name": "urgent", "job": {**JOB, "priority": 1}, "interval_seconds": 60}
    refused = client.post("/api/v1/schedules", json=schedule, headers=headers)
    assert refused.status_code == 403 and refused.json()["fields"][0]["field"] == "job.priority"
    assert count(session, Schedule, name) == 0


def test_the_schedule_past_the_quota_gets_429(client: TestClient, session: Session) -> None:
    name, headers = fresh_project(session)
    client.put(f"/api/v1/projects/{name}/quota", json={"max_schedules": 1}, headers=admin(session))
    first = {"name": "one", "job": JOB, "interval_seconds": 60}
    assert client.post("/api/v1/schedules", json=first, headers=headers).status_code == 201
    response = client.post("/api/v1/schedules", json={**first, "name": "two"}, headers=headers)
    assert response.status_code == 429, response.text
    assert (response.json()["used"], response.json()["allowed"]) == (1, 1)
    assert count(session, Schedule, name) == 1


def test_queue_position_is_counted_within_the_project_cluster_wide_for_admins(
    client: TestClient, session: Session
) -> None:
    other, _ = fresh_project(session)
    other_id = session.execute(sa.select(Project.id).where(Project.name == other)).scalar_one()
    name, headers = fresh_project(session)
    ahead = [create_job(session, other_id, **JOB, priority=3) for _ in range(4)]
    mine = client.post("/api/v1/jobs", json=JOB, headers=headers).json()
    assert mine["queue_position"] == 1 and mine["cluster_queue_position"] is None
    listed = client.get("/api/v1/jobs", headers=headers).json()["items"]
    assert [(j["queue_position"], j["cluster_queue_position"]) for j in listed] == [(1, None)]
    as_admin = admin(session, name)
    seen = client.get(f"/api/v1/jobs/{mine['id']}", headers=as_admin).json()
    assert seen["queue_position"] == 1
    assert seen["cluster_queue_position"] is not None
    assert seen["cluster_queue_position"] > len(ahead)  # the other project's jobs go first


def test_a_schedule_run_now_over_the_queued_quota_is_skipped_with_the_reason(
    client: TestClient, session: Session
) -> None:
    name, headers = fresh_project(session)
    client.put(
        f"/api/v1/projects/{name}/quota", json={"max_queued_jobs": 1}, headers=admin(session)
    )
    schedule = client.post(
        "/api/v1/schedules",
        headers=headers,
        json={"name": "nightly", "job": JOB, "interval_seconds": 3600},
    ).json()
    first = client.post(f"/api/v1/schedules/{schedule['id']}/trigger", headers=headers).json()
    assert first["outcome"] == "triggered" and first["job_id"] is not None
    second = client.post(f"/api/v1/schedules/{schedule['id']}/trigger", headers=headers)
    assert second.status_code == 201, second.text
    assert (second.json()["outcome"], second.json()["job_id"]) == ("skipped", None)
    assert (
        second.json()["reason"] == "project quota: 1 of 1 queued jobs; this fire time made no job"
    )
    assert count(session, Job, name) == 1
