"""The job fields for users' own code: command, bundle, env, progress timeout, any-JSON
hyperparameters; exactly one of trainer and command."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from services.models import Job
from tests.hostile_bundles import good

COMMAND_JOB: dict[str, Any] = {
    "name": "script",
    "command": ["python", "train.py", "--epochs", "3"],
    "replicas": 2,
}


def count_jobs(session: Session) -> int:
    return session.execute(sa.select(sa.func.count()).select_from(Job)).scalar_one()


def upload(client: TestClient, auth: dict[str, str]) -> str:
    data = good()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    assert client.put(f"/api/v1/bundles/{digest}", content=data, headers=auth).status_code == 201
    return digest


def test_a_command_job_with_bundle_env_and_timeout_reads_back(
    client: TestClient, auth: dict[str, str]
) -> None:
    digest = upload(client, auth)
    spec = {
        **COMMAND_JOB,
        "bundle": digest[7:].upper(),
        "env": {"DATA_URI": "s3://d/x.csv"},
        "progress_timeout_seconds": 0,
        "hyperparameters": {"layers": [64, 32], "optimizer": {"name": "adam", "beta": 0.9}},
    }
    response = client.post("/api/v1/jobs", json=spec, headers=auth)
    assert response.status_code == 201, response.text
    job = client.get(f"/api/v1/jobs/{response.json()['id']}", headers=auth).json()
    assert job["trainer"] is None
    assert job["command"] == ["python", "train.py", "--epochs", "3"]
    assert job["bundle"] == digest  # normalised to sha256:<lower hex>
    assert job["env"] == {"DATA_URI": "s3://d/x.csv"}
    assert job["progress_timeout_seconds"] == 0
    assert job["hyperparameters"]["optimizer"] == {"name": "adam", "beta": 0.9}
    assert job["hyperparameters"]["layers"] == [64, 32]


def test_a_trainer_job_reads_back_as_before(client: TestClient, auth: dict[str, str]) -> None:
    job = client.post("/api/v1/jobs", json={"replicas": 2}, headers=auth).json()
    assert job["trainer"] == "mlp_digits" and job["command"] is None
    assert job["bundle"] is None and job["env"] == {} and job["progress_timeout_seconds"] is None


def test_an_entrypoint_in_a_bundle_needs_no_allow_listing(
    client: TestClient, auth: dict[str, str]
) -> None:
    digest = upload(client, auth)
    spec = {"trainer": "mypkg.train:main", "replicas": 2}
    refused = client.post("/api/v1/jobs", json=spec, headers=auth)
    assert refused.status_code == 422
    assert "COHORT_ALLOWED_ENTRYPOINTS" in refused.json()["message"]
    accepted = client.post("/api/v1/jobs", json={**spec, "bundle": digest}, headers=auth)
    assert accepted.status_code == 201, accepted.text
    assert accepted.json()["trainer"] == "mypkg.train:main"


@pytest.mark.parametrize(
    ("patch", "words"),
    [
        ({"trainer": "mlp_digits"}, "not both"),
        ({"command": None, "trainer": None}, "either `trainer`"),
        ({"command": None, "bundle": "sha256:" + "a" * 64}, "either `trainer`"),
    ],
)
def test_both_or_neither_of_trainer_and_command_is_422_naming_both(
    client: TestClient, auth: dict[str, str], session: Session, patch: dict[str, Any], words: str
) -> None:
    response = client.post("/api/v1/jobs", json={**COMMAND_JOB, **patch}, headers=auth)
    assert response.status_code == 422, response.text
    message = response.json()["message"]
    assert words in message and "trainer" in message and "command" in message
    assert count_jobs(session) == 0


@pytest.mark.parametrize(
    ("patch", "field", "words"),
    [
        ({"env": {"TF_CONFIG": "{}"}}, "env", "'TF_CONFIG' is reserved"),
        ({"env": {"LD_PRELOAD": "/tmp/x.so"}}, "env", "'LD_PRELOAD' is reserved"),
        ({"env": {"PYTHONPATH": "/tmp"}}, "env", "'PYTHONPATH' is reserved"),
        ({"env": {"COHORT_JOB_ID": "7"}}, "env", "'COHORT_JOB_ID' is reserved"),
        ({"env": {"AIP_MODEL_DIR": "/x"}}, "env", "'AIP_MODEL_DIR' is reserved"),
        ({"env": {"1ABC": "x"}}, "env", "'1ABC'"),
        ({"env": {"A-B": "x"}}, "env", "'A-B'"),
        ({"env": {"OK": "a\x00b"}}, "env", "NUL"),
        ({"env": {"OK": 5}}, "env.OK", "valid string"),
        ({"command": []}, "command", "at least 1 item"),
        ({"command": ["", "x"]}, "command", "command[0]"),
        ({"command": ["python", "a\x00b"]}, "command", "command[1] contains a NUL"),
        ({"command": "python train.py"}, "command", "valid list"),
        ({"command": ["x"] * 65}, "command", "at most 64 items"),
        ({"bundle": "md5:abc"}, "bundle", "sha256"),
        ({"progress_timeout_seconds": -1}, "progress_timeout_seconds", "greater than or equal"),
    ],
)
def test_bad_code_fields_are_422_naming_the_field(
    client: TestClient,
    auth: dict[str, str],
    session: Session,
    patch: dict[str, Any],
    field: str,
    words: str,
) -> None:
    response = client.post("/api/v1/jobs", json={**COMMAND_JOB, **patch}, headers=auth)
    assert response.status_code == 422, response.text
    body = response.json()
    assert any(f["field"] == field for f in body["fields"]), body
    assert words in body["message"], body["message"]
    assert count_jobs(session) == 0


def test_a_schedule_template_names_its_bundle_by_digest(
    client: TestClient, auth: dict[str, str]
) -> None:
    schedule = {
        "name": "nightly",
        "interval_seconds": 3600,
        "job": {**COMMAND_JOB, "bundle": "sha256:" + "b" * 64},
    }
    missing = client.post("/api/v1/schedules", json=schedule, headers=auth)
    assert missing.status_code == 404 and "cohort job submit" in missing.json()["message"]
    schedule["job"]["bundle"] = upload(client, auth)
    created = client.post("/api/v1/schedules", json=schedule, headers=auth)
    assert created.status_code == 201, created.text
    assert created.json()["job"]["bundle"] == schedule["job"]["bundle"]
    assert created.json()["job"]["command"] == COMMAND_JOB["command"]


def test_a_spec_without_code_fields_hashes_as_before_they_existed() -> None:
    """An Idempotency-Key retry of a job stored before these fields matches its spec."""
    from services.jobs.schemas import JobCreate
    from services.jobs.store import _spec_hash

    spec = JobCreate.model_validate(
        {"name": "digits", "replicas": 2, "hyperparameters": {"epochs": 2}}
    )
    # sha256 of the spec's JSON as the previous schema encoded it.
    assert _spec_hash(spec) == "a9d8d1e13d872853041139b5c30af1066b8b8c755f13b90936492c7b28aa51a2"
    with_code = spec.model_copy(update={"env": {"A": "1"}})
    assert _spec_hash(with_code) != _spec_hash(spec)
