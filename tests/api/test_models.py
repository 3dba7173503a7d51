"""The model registry over REST: register versions from succeeded jobs (lineage copied),
list and show models, move aliases with their history, download a version's files; bad
names and numbers are 422s naming the field with nothing stored; scopes; another
project's token finds nothing."""

from __future__ import annotations

import hashlib
import io
import tarfile
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from services.auth.scopes import Scope
from services.auth.tokens import authenticate
from services.jobs.transitions import transition_job
from services.models import Job, MetricPoint
from services.statuses import JobStatus
from services.storage import keys
from services.storage.store import open_store
from tests.factories import create_job, create_token

LOCAL = pytest.mark.parametrize("artifact_env", ["local"], indirect=True)


def trained(
    session: Session,
    token: str,
    *,
    accuracy: float = 0.9,
    model: bool = True,
    status: JobStatus = JobStatus.SUCCEEDED,
) -> Job:
    """A job of the token's project that ended with `status`, reported metrics (replica 0's
    last `eval_accuracy` is `accuracy`) and, if `model`, saved a model in the store."""
    project_id = authenticate(session=session, token=token).project_id
    job = create_job(
        session,
        project_id,
        trainer="mlp_digits",
        replicas=2,
        hyperparameters={"learning_rate": 0.05, "epochs": 2},
    )
    job.inputs = {"train.npz": "data/digits/train.npz"}
    for target in (JobStatus.SCHEDULED, JobStatus.RUNNING, status):
        transition_job(session=session, job_id=job.id, target=target, reason="test")
    points = [
        (0, 1, "eval_accuracy", 0.5),
        (0, 2, "eval_accuracy", accuracy),
        (1, 3, "eval_accuracy", 0.99),
        (0, 2, "loss", 0.25),
    ]
    for replica, step, name, value in points:
        session.add(
            MetricPoint(
                job_id=job.id,
                attempt=1,
                replica=replica,
                step=step,
                epoch=None,
                name=name,
                value=value,
                ts=0.0,
            )
        )
    if model:
        store = open_store()
        store.put_bytes(f"{keys.model_prefix(job.id)}/saved_model.pb", b"graph-%d" % job.id)
        store.put_bytes(f"{keys.model_prefix(job.id)}/variables/variables.index", b"index")
    session.flush()
    return job


def register(client: TestClient, auth: dict[str, str], job_id: int, name: str = "digits") -> Any:
    return client.post(f"/api/v1/models/{name}/versions", json={"job_id": job_id}, headers=auth)


def move(
    client: TestClient,
    auth: dict[str, str],
    version: int,
    reason: str = "",
    alias: str = "production",
    name: str = "digits",
) -> Any:
    return client.put(
        f"/api/v1/models/{name}/aliases/{alias}",
        json={"version": version, "reason": reason},
        headers=auth,
    )


@LOCAL
def test_a_registered_version_keeps_its_jobs_lineage(
    client: TestClient,
    session: Session,
    token: str,
    auth: dict[str, str],
    artifact_env: str,  # noqa: ARG001
) -> None:
    job = trained(session, token)
    response = register(client, auth, job.id)
    assert response.status_code == 201, response.text
    version = response.json()
    assert version["model"] == "digits" and version["version"] == 1
    assert version["job_id"] == job.id and version["artifact"] == f"jobs/{job.id}/model"
    assert version["registered_by"].startswith("token test (id ")
    lineage = version["lineage"]
    assert lineage["job_id"] == job.id and lineage["attempt"] == 1
    assert lineage["trainer"] == "mlp_digits"
    assert lineage["hyperparameters"]["learning_rate"] == 0.05
    # The last value of each metric, replica 0 only (replica 1's 0.99 is not the model's).
    assert lineage["metrics"] == {"eval_accuracy": 0.9, "loss": 0.25}
    # Its input's data is gone (never uploaded here): no digest to name.
    assert lineage["inputs"] == [
        {"name": "train.npz", "path": "data/digits/train.npz", "digest": None}
    ]
    # The next registration is version 2; the model lists both, newest first.
    second = trained(session, token, accuracy=0.95)
    assert register(client, auth, second.id).json()["version"] == 2
    model = client.get("/api/v1/models/digits", headers=auth).json()
    assert model["latest_version"] == 2
    assert [v["version"] for v in model["versions"]] == [2, 1]
    listed = client.get("/api/v1/models", headers=auth).json()["items"]
    assert [(m["name"], m["latest_version"]) for m in listed] == [("digits", 2)]
    one = client.get("/api/v1/models/digits/versions/1", headers=auth).json()
    assert one["job_id"] == job.id and one["lineage"]["metrics"]["eval_accuracy"] == 0.9


@LOCAL
def test_an_alias_moves_and_keeps_every_move_with_who_and_why(
    client: TestClient,
    session: Session,
    token: str,
    auth: dict[str, str],
    artifact_env: str,  # noqa: ARG001
) -> None:
    for accuracy in (0.9, 0.95):
        assert (
            register(client, auth, trained(session, token, accuracy=accuracy).id).status_code == 201
        )
    assert move(client, auth, 2, "better on the holdout").json()["version"] == 2
    assert move(client, auth, 1, "rollback: v2 mislabels sevens").json()["version"] == 1
    assert (
        client.get("/api/v1/models/digits/aliases/production", headers=auth).json()["version"] == 1
    )
    history = client.get("/api/v1/models/digits/aliases/production/history", headers=auth)
    moves = [(m["from_version"], m["to_version"], m["reason"]) for m in history.json()["items"]]
    assert moves == [(2, 1, "rollback: v2 mislabels sevens"), (None, 2, "better on the holdout")]
    assert all(m["moved_by"].startswith("token test (id ") for m in history.json()["items"])
    model = client.get("/api/v1/models/digits", headers=auth).json()
    assert [(a["name"], a["version"]) for a in model["aliases"]] == [("production", 1)]
    assert {v["version"]: v["aliases"] for v in model["versions"]} == {2: [], 1: ["production"]}


@LOCAL
@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("post", "/api/v1/models/bad name/versions", {"job_id": 1}, "name"),
        ("post", "/api/v1/models/a:b/versions", {"job_id": 1}, "name"),
        ("post", "/api/v1/models/digits/versions", {"job_id": 0}, "job_id"),
        ("post", "/api/v1/models/digits/versions", {"job_id": 2**31}, "job_id"),
        ("post", "/api/v1/models/digits/versions", {"job": 1}, "job"),
        ("post", "/api/v1/models/digits/versions", {"job_id": 999999}, "job_id"),
        ("put", "/api/v1/models/digits/aliases/1st", {"version": 1}, "alias"),
        ("put", "/api/v1/models/digits/aliases/a@b", {"version": 1}, "alias"),
        ("put", "/api/v1/models/digits/aliases/staging", {"version": 7}, "version"),
        ("put", "/api/v1/models/digits/aliases/staging", {"version": "1"}, "version"),
        (
            "put",
            "/api/v1/models/digits/aliases/staging",
            {"version": 1, "reason": "x" * 1001},
            "reason",
        ),
    ],
)
def test_bad_names_and_numbers_are_422_naming_the_field_and_store_nothing(
    client: TestClient,
    session: Session,
    token: str,
    auth: dict[str, str],
    artifact_env: str,  # noqa: ARG001
    method: str,
    path: str,
    body: dict[str, Any],
    field: str,
) -> None:
    assert register(client, auth, trained(session, token).id).status_code == 201
    response = getattr(client, method)(path, json=body, headers=auth)
    assert response.status_code == 422, response.text
    assert field in [f["field"] for f in response.json()["fields"]], response.text
    model = client.get("/api/v1/models/digits", headers=auth).json()
    assert model["latest_version"] == 1 and model["aliases"] == []
    assert [m["name"] for m in client.get("/api/v1/models", headers=auth).json()["items"]] == [
        "digits"
    ]


@LOCAL
@pytest.mark.parametrize(
    ("kwargs", "words"),
    [({"status": JobStatus.FAILED}, "is failed"), ({"model": False}, "saved no model")],
)
def test_a_job_that_failed_or_saved_no_model_is_409_and_makes_no_model(
    client: TestClient,
    session: Session,
    token: str,
    auth: dict[str, str],
    artifact_env: str,  # noqa: ARG001
    kwargs: dict[str, Any],
    words: str,
) -> None:
    response = register(client, auth, trained(session, token, **kwargs).id)
    assert response.status_code == 409, response.text
    assert response.json()["fields"][0]["field"] == "job_id"
    assert words in response.json()["message"]
    assert client.get("/api/v1/models/digits", headers=auth).status_code == 404
    assert client.get("/api/v1/models", headers=auth).json()["items"] == []


@LOCAL
def test_scopes_reads_need_read_writes_need_schedules(
    client: TestClient,
    session: Session,
    token: str,
    auth: dict[str, str],
    artifact_env: str,  # noqa: ARG001
) -> None:
    job = trained(session, token)
    assert register(client, auth, job.id).status_code == 201
    reader = {"Authorization": f"Bearer {create_token(session, 'default', (Scope.READ,))[0]}"}
    submitter = {
        "Authorization": f"Bearer {create_token(session, 'default', (Scope.READ, Scope.SUBMIT))[0]}"
    }
    scheduler = {
        "Authorization": f"Bearer {create_token(session, 'default', (Scope.SCHEDULES,))[0]}"
    }
    admin = {"Authorization": f"Bearer {create_token(session, 'default', (Scope.ADMIN,))[0]}"}
    for refused in (reader, submitter):
        response = register(client, refused, job.id)
        assert response.status_code == 403 and "'schedules'" in response.json()["message"]
        assert move(client, refused, 1).status_code == 403
    assert client.get("/api/v1/models/digits", headers=scheduler).status_code == 403
    assert client.get("/api/v1/models/digits", headers=reader).status_code == 200
    assert move(client, scheduler, 1).status_code == 200
    assert move(client, admin, 1, "confirmed").status_code == 200
    assert register(client, admin, job.id).json()["version"] == 2
    history = client.get("/api/v1/models/digits/aliases/production/history", headers=reader)
    assert len(history.json()["items"]) == 2


@LOCAL
def test_another_projects_token_finds_nothing_and_cannot_register_its_jobs(
    client: TestClient,
    session: Session,
    token: str,
    auth: dict[str, str],
    artifact_env: str,  # noqa: ARG001
) -> None:
    job = trained(session, token)
    assert register(client, auth, job.id).status_code == 201
    assert move(client, auth, 1).status_code == 200
    other = {"Authorization": f"Bearer {create_token(session, 'other')[0]}"}
    for path in (
        "/api/v1/models/digits",
        "/api/v1/models/digits/versions/1",
        "/api/v1/models/digits/aliases/production",
        "/api/v1/models/digits/aliases/production/history",
        "/api/v1/models/digits/versions/1/files",
        "/api/v1/models/digits/versions/1/files/download",
    ):
        response = client.get(path, headers=other)
        assert response.status_code == 404, (path, response.text)
        assert b"graph" not in response.content
    assert client.get("/api/v1/models", headers=other).json()["items"] == []
    assert move(client, other, 1, alias="production").status_code == 404
    # Its own model of the same name cannot take the first project's job either.
    response = register(client, other, job.id)
    assert response.status_code == 422 and response.json()["fields"][0]["field"] == "job_id"
    assert client.get("/api/v1/models", headers=other).json()["items"] == []
    assert (
        client.get("/api/v1/models/digits/aliases/production", headers=auth).json()["version"] == 1
    )


def test_a_versions_files_list_and_download_whole_or_by_range(
    client: TestClient,
    session: Session,
    token: str,
    auth: dict[str, str],
    artifact_env: str,  # noqa: ARG001
) -> None:
    job = trained(session, token)
    assert register(client, auth, job.id).status_code == 201
    files = client.get("/api/v1/models/digits/versions/1/files", headers=auth).json()["items"]
    assert [f["path"] for f in files] == ["saved_model.pb", "variables/variables.index"]
    whole = client.get("/api/v1/models/digits/versions/1/files/download", headers=auth)
    assert whole.status_code == 200 and "digits-v1.tar.gz" in whole.headers["content-disposition"]
    with tarfile.open(fileobj=io.BytesIO(whole.content), mode="r:gz") as archive:
        assert sorted(archive.getnames()) == ["saved_model.pb", "variables/variables.index"]
        member = archive.extractfile("saved_model.pb")
        assert member is not None and member.read() == b"graph-%d" % job.id
    part = client.get(
        "/api/v1/models/digits/versions/1/files/download",
        params={"path": "saved_model.pb"},
        headers={**auth, "Range": "bytes=6-"},
    )
    assert part.status_code == 206 and part.content == (b"graph-%d" % job.id)[6:]
    for path in ("../../jobs", "/etc/passwd"):
        escaped = client.get(
            "/api/v1/models/digits/versions/1/files/download", params={"path": path}, headers=auth
        )
        assert escaped.status_code == 422 and escaped.json()["fields"][0]["field"] == "path"
    missing = client.get("/api/v1/models/digits/versions/2/files", headers=auth)
    assert missing.status_code == 404


@LOCAL
def test_a_versions_inputs_carry_their_datas_content_digest(
    client: TestClient,
    session: Session,
    token: str,
    auth: dict[str, str],
    artifact_env: str,  # noqa: ARG001
) -> None:
    data = b"digits-v1" * 100
    put = client.put("/api/v1/data/digits/train.npz", content=data, headers=auth)
    assert put.status_code in (200, 201), put.text
    first = register(client, auth, trained(session, token).id).json()
    expected = f"sha256:{hashlib.sha256(data).hexdigest()}"
    assert first["lineage"]["inputs"][0]["digest"] == expected
    # New data under the same path: the next version names the new content; the first
    # keeps what it was registered with.
    client.put("/api/v1/data/digits/train.npz", content=b"digits-v2", headers=auth)
    second = register(client, auth, trained(session, token).id).json()
    assert second["lineage"]["inputs"][0]["digest"] == (
        f"sha256:{hashlib.sha256(b'digits-v2').hexdigest()}"
    )
    again = client.get("/api/v1/models/digits/versions/1", headers=auth).json()
    assert again["lineage"]["inputs"][0]["digest"] == expected
