"""The job field `image`: stored and shown in the job view; anything but an image
reference is a 422 naming the field and what to give instead."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

IMAGE_JOB: dict[str, Any] = {
    "name": "in-a-box",
    "command": ["python", "train.py"],
    "replicas": 2,
    "image": "localhost/team-tf:1",
}


def test_a_job_with_an_image_reads_back_with_it(client: TestClient, auth: dict[str, str]) -> None:
    response = client.post("/api/v1/jobs", json=IMAGE_JOB, headers=auth)
    assert response.status_code == 201, response.text
    job = client.get(f"/api/v1/jobs/{response.json()['id']}", headers=auth).json()
    assert job["image"] == "localhost/team-tf:1"
    plain = client.post("/api/v1/jobs", json={"replicas": 1}, headers=auth).json()
    assert plain["image"] is None


@pytest.mark.parametrize(
    "image", ["team-tf:1 --privileged", "team-tf;id", "$(id)", "--volume=/:/host", "Team/TF"]
)
def test_anything_but_an_image_reference_is_422_naming_the_field_and_the_fix(
    client: TestClient, auth: dict[str, str], image: str
) -> None:
    response = client.post("/api/v1/jobs", json={**IMAGE_JOB, "image": image}, headers=auth)
    assert response.status_code == 422, response.text
    body = response.json()
    assert any(f["field"] == "image" for f in body["fields"]), body
    assert "not an image reference" in body["message"]
    assert "localhost/team-tf:1" in body["message"]  # an example of what to give


def test_an_image_job_with_requirements_is_422_and_nothing_is_stored(
    client: TestClient, auth: dict[str, str]
) -> None:
    before = client.get("/api/v1/jobs", headers=auth).json()["items"]
    response = client.post(
        "/api/v1/jobs", json={**IMAGE_JOB, "pip": ["tabulate==0.9.0"]}, headers=auth
    )
    assert response.status_code == 422, response.text
    body = response.json()
    assert any(f["field"] == "image" for f in body["fields"]), body
    assert "install them in the image" in body["message"]
    assert client.get("/api/v1/jobs", headers=auth).json()["items"] == before
