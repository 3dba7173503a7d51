"""A job's requirements at submission: `pip` or the bundle's requirements.txt, stored
normalised and shown in the job's view, and every refusal a 422 naming the line and the
fix, with nothing stored."""

from __future__ import annotations

import hashlib
import tarfile
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from services.jobs.replica_specs import start_message
from services.models import Job
from services.wire.requirements import requirements_digest
from tests.api.test_job_code_fields import COMMAND_JOB, count_jobs
from tests.hostile_bundles import _file, _link, tar_gz


def upload(client: TestClient, auth: dict[str, str], files: dict[str, bytes]) -> str:
    def add(tar: tarfile.TarFile) -> None:
        for name, data in sorted(files.items()):
            _file(tar, name, data)

    data = tar_gz(add)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    response = client.put(f"/api/v1/bundles/{digest}", content=data, headers=auth)
    assert response.status_code in (200, 201), response.text
    return digest


def submit(client: TestClient, auth: dict[str, str], **fields: Any) -> Any:
    return client.post("/api/v1/jobs", json={**COMMAND_JOB, **fields}, headers=auth)


def test_pip_lines_are_stored_normalised_and_shown_in_the_jobs_view(
    client: TestClient, auth: dict[str, str], session: Session
) -> None:
    response = submit(client, auth, pip=["tabulate == 0.9.0", "humanize>=4  # sizes"])
    assert response.status_code == 201, response.text
    job = client.get(f"/api/v1/jobs/{response.json()['id']}", headers=auth).json()
    assert job["pip"] == job["requirements"] == ["humanize>=4", "tabulate==0.9.0"]
    assert job["requirements_count"] == 2
    assert job["requirements_digest"] == requirements_digest(job["requirements"])
    stored = session.get(Job, job["id"])
    assert stored is not None and stored.requirements == "humanize>=4\ntabulate==0.9.0"


def test_a_bundles_requirements_txt_is_the_jobs_requirements(
    client: TestClient, auth: dict[str, str], session: Session
) -> None:
    text = b"# what train.py imports\ntabulate==0.9.0\n"
    digest = upload(client, auth, {"train.py": b"import tabulate\n", "requirements.txt": text})
    response = submit(client, auth, bundle=digest)
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["pip"] == [] and job["requirements"] == ["tabulate==0.9.0"]
    assert job["requirements_count"] == 1
    stored = session.get(Job, job["id"])
    assert stored is not None
    # The agent gets them in the start message: it never reads them from the bundle.
    placed = type(
        "Placed",
        (),
        {
            "attempt": 1,
            "index": 0,
            "role": "worker",
            "role_index": 0,
            "node_id": "n1",
            "port": 1,
            "gpu_ids": "",
            "tf_config": None,
        },
    )
    assert start_message(stored, placed()).spec.requirements == ["tabulate==0.9.0"]


def test_a_requirements_txt_below_the_top_level_is_not_the_jobs(
    client: TestClient, auth: dict[str, str]
) -> None:
    digest = upload(client, auth, {"train.py": b"", "docs/requirements.txt": b"sphinx\n"})
    response = submit(client, auth, bundle=digest)
    assert response.status_code == 201, response.text
    assert response.json()["requirements"] == []


def test_pip_and_a_requirements_txt_both_is_422_naming_both_and_the_fix(
    client: TestClient, auth: dict[str, str], session: Session
) -> None:
    digest = upload(client, auth, {"train.py": b"", "requirements.txt": b"tabulate\n"})
    response = submit(client, auth, bundle=digest, pip=["humanize"])
    assert response.status_code == 422, response.text
    message = response.json()["message"]
    assert "requirements.txt" in message and "`pip`" in message and "keep one" in message
    assert count_jobs(session) == 0


@pytest.mark.parametrize(
    ("lines", "words"),
    [
        (["tabulate", "tensorflow==2.15.0"], "pip[1]: 'tensorflow' is refused"),
        (["tf_keras"], "breaks the gang's collectives"),
        (["keras>=3"], "breaks the gang's collectives"),
        (["cohort"], "'cohort' is refused"),
        (["-e ."], "pip[0]: pip option '-e' is not allowed"),
        (["--extra-index-url https://example.org/simple"], "'--extra-index-url' is not allowed"),
        (["git+https://example.org/x.git"], "is a URL or a path"),
    ],
)
def test_a_refused_pip_line_is_422_naming_it_and_nothing_is_stored(
    client: TestClient, auth: dict[str, str], session: Session, lines: list[str], words: str
) -> None:
    response = submit(client, auth, pip=lines)
    assert response.status_code == 422, response.text
    body = response.json()
    assert words in body["message"], body["message"]
    assert any(field["field"].startswith("pip") for field in body["fields"]), body
    assert count_jobs(session) == 0


def test_a_refused_line_of_requirements_txt_is_422_naming_the_file_and_line(
    client: TestClient, auth: dict[str, str], session: Session
) -> None:
    text = b"tabulate==0.9.0\n\ntensorflow-cpu==2.10.0\n"
    digest = upload(client, auth, {"train.py": b"", "requirements.txt": text})
    response = submit(client, auth, bundle=digest)
    assert response.status_code == 422, response.text
    message = response.json()["message"]
    assert "requirements.txt line 3: 'tensorflow-cpu' is refused" in message, message
    assert "the node's is used" in message
    assert count_jobs(session) == 0
    # The same check without storing anything answers the same.
    validated = client.post(
        "/api/v1/validate/job", json={**COMMAND_JOB, "bundle": digest}, headers=auth
    )
    assert validated.status_code == 422 and "line 3" in validated.json()["message"]


def test_a_requirements_txt_that_is_a_link_is_refused(
    client: TestClient, auth: dict[str, str], session: Session
) -> None:
    def add(tar: tarfile.TarFile) -> None:
        _file(tar, "deps.txt", b"tabulate\n")
        _link(tar, "requirements.txt", "deps.txt")

    data = tar_gz(add)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    assert client.put(f"/api/v1/bundles/{digest}", content=data, headers=auth).status_code == 201
    response = submit(client, auth, bundle=digest)
    assert response.status_code == 422, response.text
    assert "requirements.txt is a symlink, not a file" in response.json()["message"]
    assert count_jobs(session) == 0
