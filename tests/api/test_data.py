"""A project's data over REST (PostgreSQL, a directory store and a real S3 server), and the
job field `inputs` that names it."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from services.auth.tokens import authenticate
from services.jobs.inputs import resolve_inputs
from services.models import Job, Schedule
from services.settings import get_settings
from services.storage import keys
from services.storage.store import open_store
from services.wire.client import get_redis
from services.wire.keys import EVENTS_STREAM
from tests.factories import create_token

T = TypeVar("T")


def LOCAL(test: T) -> T:  # noqa: N802 - used as a decorator, like pytest's marks
    """Run the test against a fresh directory store of its own (COHORT_ARTIFACT_URL)."""
    test = pytest.mark.usefixtures("artifact_env")(test)
    return pytest.mark.parametrize("artifact_env", ["local"], indirect=True)(test)


CSV = b"x,y\n1,2\n3,4\n"
JOB: dict[str, Any] = {
    "name": "reader",
    "command": ["python", "train.py"],
    "replicas": 1,
    "strategy": "one_device",
}


def spool_is_empty() -> bool:
    spool = get_settings().data_dir / "uploads"
    return not spool.exists() or os.listdir(spool) == []


def count(session: Session, model: type[Job] | type[Schedule]) -> int:
    return session.execute(sa.select(sa.func.count()).select_from(model)).scalar_one()


def other_project(session: Session) -> dict[str, str]:
    return {"Authorization": f"Bearer {create_token(session, 'other')[0]}"}


def test_push_list_replace_delete(
    client: TestClient, auth: dict[str, str], session: Session, artifact_env: str
) -> None:
    created = client.put("/api/v1/data/digits/train.csv", content=CSV, headers=auth)
    assert created.status_code == 201, created.text
    assert created.json() == {
        "path": "digits/train.csv",
        "size": len(CSV),
        "sha256": "sha256:" + hashlib.sha256(CSV).hexdigest(),
    }
    assert client.put("/api/v1/data/notes.txt", content=b"n", headers=auth).status_code == 201
    listed = client.get("/api/v1/data", headers=auth)
    assert listed.json() == {
        "items": [
            {"path": "digits/train.csv", "size": len(CSV), "sha256": None},
            {"path": "notes.txt", "size": 1, "sha256": None},
        ]
    }
    # Stored where the layout says, under the project's own prefix.
    project_id = authenticate(session=session, token=auth["Authorization"][7:]).project_id
    store = open_store()
    assert store.url == artifact_env
    with store.open_read(keys.data_key(project_id, "digits/train.csv")) as handle:
        assert handle.read() == CSV
    replaced = client.put("/api/v1/data/digits/train.csv", content=b"x\n", headers=auth)
    assert replaced.status_code == 200 and replaced.json()["size"] == 2
    assert client.delete("/api/v1/data/digits/train.csv", headers=auth).status_code == 204
    assert [i["path"] for i in client.get("/api/v1/data", headers=auth).json()["items"]] == [
        "notes.txt"
    ]
    gone = client.delete("/api/v1/data/digits/train.csv", headers=auth)
    assert gone.status_code == 404 and "cohort data push" in gone.json()["message"]
    # The directory the deleted file left is no obstacle to a file of that name.
    assert client.put("/api/v1/data/digits", content=b"d", headers=auth).status_code == 201
    assert spool_is_empty()


@LOCAL
def test_another_projects_data_is_never_visible(
    client: TestClient, auth: dict[str, str], session: Session
) -> None:
    assert client.put("/api/v1/data/secret.csv", content=CSV, headers=auth).status_code == 201
    other = other_project(session)
    assert client.get("/api/v1/data", headers=other).json() == {"items": []}
    assert client.delete("/api/v1/data/secret.csv", headers=other).status_code == 404
    refused = client.post(
        "/api/v1/jobs", headers=other, json={**JOB, "inputs": {"secret.csv": "data/secret.csv"}}
    )
    assert refused.status_code == 404 and "secret.csv" in refused.json()["message"]
    # Its own file of the same path is its own, and the first project's stays as it was.
    assert client.put("/api/v1/data/secret.csv", content=b"o", headers=other).status_code == 201
    assert client.get("/api/v1/data", headers=auth).json()["items"][0]["size"] == len(CSV)
    assert client.get("/api/v1/data").status_code == 401


@LOCAL
# Dots encoded, so the client sends them as they are rather than resolving them itself.
@pytest.mark.parametrize(
    "path",
    [
        "%2Fetc%2Fpasswd",
        "a/%2E%2E/%2E%2E/b",
        "%2E%2E",
        "a//b",
        "a/%2E/b",
        "a%5Cb",
        "a%01b",
        "a%7Fb",
    ],
)
def test_a_path_that_could_leave_the_projects_data_is_422_naming_path(
    client: TestClient, auth: dict[str, str], path: str
) -> None:
    response = client.put(f"/api/v1/data/{path}", content=CSV, headers=auth)
    assert response.status_code == 422, (path, response.text)
    assert response.json()["fields"][0]["field"] == "path"
    assert "relative path" in response.json()["message"]
    assert client.delete(f"/api/v1/data/{path}", headers=auth).status_code in (404, 422)
    assert open_store().list("data") == []
    assert spool_is_empty()


@LOCAL
def test_a_file_and_a_directory_cannot_share_a_path(
    client: TestClient, auth: dict[str, str]
) -> None:
    assert client.put("/api/v1/data/a/b.csv", content=CSV, headers=auth).status_code == 201
    over_dir = client.put("/api/v1/data/a", content=CSV, headers=auth)
    assert over_dir.status_code == 409 and "directory" in over_dir.json()["message"]
    assert client.put("/api/v1/data/c", content=CSV, headers=auth).status_code == 201
    under_file = client.put("/api/v1/data/c/d.csv", content=CSV, headers=auth)
    assert under_file.status_code == 409 and "'c' is a file" in under_file.json()["message"]


@pytest.fixture
def small_data_limit(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("COHORT_MAX_DATA_BYTES", "4096")
    get_settings.cache_clear()
    yield
    monkeypatch.undo()
    get_settings.cache_clear()


@LOCAL
@pytest.mark.usefixtures("small_data_limit")
def test_a_body_past_the_data_limit_is_413_declared_or_streamed(
    client: TestClient, auth: dict[str, str]
) -> None:
    data = os.urandom(10_000)
    declared = client.put("/api/v1/data/big.bin", content=data, headers=auth)
    assert declared.status_code == 413
    assert "COHORT_MAX_DATA_BYTES" in declared.json()["message"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: chunked
        for start in range(0, len(data), 1000):
            yield data[start : start + 1000]

    assert client.put("/api/v1/data/big.bin", content=chunks(), headers=auth).status_code == 413
    assert client.put("/api/v1/data/ok.bin", content=data[:4096], headers=auth).status_code == 201
    assert [i["path"] for i in client.get("/api/v1/data", headers=auth).json()["items"]] == [
        "ok.bin"
    ]
    assert spool_is_empty()


@LOCAL
def test_a_job_names_its_inputs_and_they_resolve_to_store_keys(
    client: TestClient, auth: dict[str, str], session: Session
) -> None:
    client.put("/api/v1/data/digits/train.csv", content=CSV, headers=auth)
    spec = {**JOB, "inputs": {"train.csv": "data/digits/train.csv"}}
    response = client.post("/api/v1/jobs", json=spec, headers=auth)
    assert response.status_code == 201, response.text
    job_id = response.json()["id"]
    assert client.get(f"/api/v1/jobs/{job_id}", headers=auth).json()["inputs"] == {
        "train.csv": "data/digits/train.csv"
    }
    job = session.get(Job, job_id)
    assert job is not None
    assert resolve_inputs(job) == {"train.csv": keys.data_key(job.project_id, "digits/train.csv")}
    assert resolve_inputs(job)["train.csv"] == f"data/{job.project_id}/digits/train.csv"
    # A job without inputs reads back with none.
    plain = client.post("/api/v1/jobs", json=JOB, headers=auth).json()
    assert plain["inputs"] == {}


@LOCAL
def test_an_input_naming_missing_data_is_404_naming_it(
    client: TestClient, auth: dict[str, str], session: Session
) -> None:
    before = count(session, Job)
    response = client.post(
        "/api/v1/jobs",
        headers=auth,
        json={**JOB, "inputs": {"train.csv": "data/nowhere/train.csv"}},
    )
    assert response.status_code == 404
    assert "'nowhere/train.csv'" in response.json()["message"]
    assert "cohort data push" in response.json()["message"]
    assert count(session, Job) == before


@pytest.mark.parametrize(
    ("inputs", "words"),
    [
        ({"a/b.csv": "data/x.csv"}, "plain file name"),
        ({".hidden": "data/x.csv"}, "plain file name"),
        ({"..": "data/x.csv"}, "plain file name"),
        ({"": "data/x.csv"}, "1..100 characters"),
        ({"n" * 101: "data/x.csv"}, "1..100 characters"),
        ({"x.csv": "x.csv"}, "'data/<path>'"),
        ({"x.csv": "s3://bucket/x.csv"}, "'data/<path>'"),
        ({"x.csv": "data/../x.csv"}, "'..' segment"),
        ({"x.csv": "data//x.csv"}, "relative"),
        ({"x.csv": "data/a\\b.csv"}, "backslash"),
        ({f"f{i}": "data/x.csv" for i in range(33)}, "at most 32 inputs"),
    ],
)
def test_malformed_inputs_are_422_naming_the_field(
    client: TestClient, auth: dict[str, str], session: Session, inputs: dict[str, str], words: str
) -> None:
    before = count(session, Job)
    response = client.post("/api/v1/jobs", json={**JOB, "inputs": inputs}, headers=auth)
    assert response.status_code == 422, response.text
    assert response.json()["fields"][0]["field"] == "inputs"
    assert words in response.json()["message"]
    assert count(session, Job) == before


@LOCAL
def test_a_schedules_template_takes_inputs_and_checks_them(
    client: TestClient, auth: dict[str, str], session: Session
) -> None:
    schedule = {
        "name": "nightly",
        "interval_seconds": 3600,
        "job": {**JOB, "inputs": {"train.csv": "data/train.csv"}},
    }
    missing = client.post("/api/v1/schedules", json=schedule, headers=auth)
    assert missing.status_code == 404 and "'train.csv'" in missing.json()["message"]
    assert count(session, Schedule) == 0
    client.put("/api/v1/data/train.csv", content=CSV, headers=auth)
    created = client.post("/api/v1/schedules", json=schedule, headers=auth)
    assert created.status_code == 201, created.text
    assert created.json()["job"]["inputs"] == {"train.csv": "data/train.csv"}


@LOCAL
def test_a_data_push_wakes_the_scheduler(client: TestClient, auth: dict[str, str]) -> None:
    # A data-triggered schedule with no settle time fires in the pass this wakes, not
    # at the next periodic one (COHORT_SCHEDULER_INTERVAL).
    bus = get_redis()
    newest = bus.xrevrange(EVENTS_STREAM, count=1)
    since = newest[0][0] if newest else "0-0"
    assert client.put("/api/v1/data/woken.csv", content=b"x", headers=auth).status_code == 201

    def wakes() -> int:
        entries = bus.xrange(EVENTS_STREAM, min=f"({since}")
        return sum(fields.get("kind") == "wake" for _, fields in entries)

    deadline = time.monotonic() + 5  # a wake sent just before may hold this one a window
    while not wakes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert wakes() >= 1
