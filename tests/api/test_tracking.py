"""A project's MLflow settings over REST: an admin reads and sets them, everyone else gets
403; an address that is no MLflow server is a 422 naming the field, nothing stored."""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from services.models import Project, ProjectTracking
from tests.api.test_quotas import admin, fresh_project


def path(name: str) -> str:
    return f"/api/v1/projects/{name}/mlflow"


def test_only_an_admin_reads_or_sets_a_projects_mlflow(
    client: TestClient, auth: dict[str, str]
) -> None:
    for method, body in (("GET", None), ("PUT", {"tracking_uri": "http://m:5000"})):
        response = client.request(method, path("default"), json=body, headers=auth)
        assert response.status_code == 403, response.text
    assert client.get(path("default")).status_code == 401


def test_an_admin_sets_a_projects_server_and_experiment_over_the_clusters(
    client: TestClient, session: Session
) -> None:
    name, _ = fresh_project(session)
    headers = admin(session)
    before = client.get(path(name), headers=headers).json()
    assert before == {
        "project": name,
        "tracking_uri": "",  # the cluster has none (COHORT_MLFLOW_TRACKING_URI unset)
        "experiment": name,
        "overrides": {"tracking_uri": None, "experiment": None},
        "default_tracking_uri": "",
    }
    body = {"tracking_uri": " https://mlflow.internal:5000/team ", "experiment": "vision"}
    after = client.put(path(name), json=body, headers=headers)
    assert after.status_code == 200, after.text
    assert after.json()["tracking_uri"] == "https://mlflow.internal:5000/team"
    assert after.json()["experiment"] == "vision"
    assert client.get(path(name), headers=headers).json() == after.json()
    off = client.put(path(name), json={"tracking_uri": ""}, headers=headers).json()
    assert (off["tracking_uri"], off["experiment"]) == ("", name)


def test_bad_mlflow_settings_name_the_field_and_store_nothing(
    client: TestClient, session: Session
) -> None:
    name, _ = fresh_project(session)
    headers = admin(session)
    for body, field in (
        ({"tracking_uri": "sqlite:///mlflow.db"}, "tracking_uri"),
        ({"tracking_uri": "/var/mlruns"}, "tracking_uri"),
        ({"tracking_uri": "http://"}, "tracking_uri"),
        ({"experiment": ""}, "experiment"),
        ({"tracking_url": "http://m:5000"}, "tracking_url"),
    ):
        response = client.put(path(name), json=body, headers=headers)
        assert response.status_code == 422, response.text
        assert [f["field"] for f in response.json()["fields"]] == [field], response.text
    refused = client.put(path(name), json={"tracking_uri": "file:///x"}, headers=headers).json()
    assert "http(s)://host[:port]" in refused["fields"][0]["message"]
    project = session.execute(sa.select(Project).where(Project.name == name)).scalar_one()
    assert session.get(ProjectTracking, project.id) is None
    missing = client.get(path(f"nope-{uuid.uuid4().hex[:6]}"), headers=headers)
    assert missing.status_code == 404
