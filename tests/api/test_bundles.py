"""Bundle uploads over REST against PostgreSQL and the artifact store (a directory and S3)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from services.models import Bundle
from services.settings import get_settings
from services.storage.keys import bundle_key
from services.storage.store import open_store
from tests.factories import create_token
from tests.hostile_bundles import HOSTILE, good, many_files


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def records(session: Session) -> int:
    return session.execute(sa.select(sa.func.count()).select_from(Bundle)).scalar_one()


def spool_is_empty() -> bool:
    spool = get_settings().data_dir / "uploads"
    return not spool.exists() or os.listdir(spool) == []


@pytest.fixture
def limits(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Small limits, set as an operator sets them: in the environment."""
    monkeypatch.setenv("COHORT_MAX_BUNDLE_BYTES", "4096")
    monkeypatch.setenv("COHORT_MAX_BUNDLE_FILES", "5")
    get_settings.cache_clear()
    yield
    monkeypatch.undo()
    get_settings.cache_clear()


def test_upload_once_then_the_project_has_it(
    client: TestClient, auth: dict[str, str], session: Session, artifact_env: str
) -> None:
    data = good()
    digest = digest_of(data)
    assert client.head(f"/api/v1/bundles/{digest}", headers=auth).status_code == 404
    response = client.put(f"/api/v1/bundles/{digest}", content=data, headers=auth)
    assert response.status_code == 201, response.text
    assert response.json() | {"created_at": None} == {
        "digest": digest,
        "size": len(data),
        "files": 2,
        "created_at": None,
    }
    assert client.head(f"/api/v1/bundles/{digest}", headers=auth).status_code == 200
    # The plain hex form names the same bundle.
    assert client.head(f"/api/v1/bundles/{digest[7:]}", headers=auth).status_code == 200
    again = client.put(f"/api/v1/bundles/{digest}", content=data, headers=auth)
    assert again.status_code == 200 and again.json()["digest"] == digest
    assert records(session) == 1
    store = open_store()
    assert store.url == artifact_env
    assert store.list("bundles") == [(bundle_key(digest), len(data))]
    assert spool_is_empty()


def test_another_projects_bundle_must_still_be_sent(
    client: TestClient, auth: dict[str, str], session: Session
) -> None:
    data = good()
    digest = digest_of(data)
    assert client.put(f"/api/v1/bundles/{digest}", content=data, headers=auth).status_code == 201
    other = {"Authorization": f"Bearer {create_token(session, 'other')[0]}"}
    assert client.head(f"/api/v1/bundles/{digest}", headers=other).status_code == 404
    wrong = client.put(f"/api/v1/bundles/{digest}", content=b"not these bytes", headers=other)
    assert wrong.status_code == 422  # knowing the digest is not enough: the bytes are needed
    assert client.head(f"/api/v1/bundles/{digest}", headers=other).status_code == 404
    assert client.put(f"/api/v1/bundles/{digest}", content=data, headers=other).status_code == 201
    assert records(session) == 2


def test_a_digest_that_does_not_match_names_both_and_stores_nothing(
    client: TestClient,
    auth: dict[str, str],
    session: Session,
    artifact_env: str,  # noqa: ARG001 - an empty store of its own
) -> None:
    data = good()
    claimed = "sha256:" + "0" * 64
    response = client.put(f"/api/v1/bundles/{claimed}", content=data, headers=auth)
    assert response.status_code == 422
    message = response.json()["message"]
    assert claimed in message and digest_of(data) in message
    assert response.json()["fields"][0]["field"] == "digest"
    assert records(session) == 0
    assert not open_store().exists(bundle_key(claimed))
    assert not open_store().exists(bundle_key(digest_of(data)))
    assert spool_is_empty()


def test_a_malformed_digest_is_422_naming_it(client: TestClient, auth: dict[str, str]) -> None:
    response = client.put("/api/v1/bundles/md5:abc", content=b"x", headers=auth)
    assert response.status_code == 422
    assert "sha256" in response.json()["message"]
    assert client.head("/api/v1/bundles/abc", headers=auth).status_code == 422


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_archives_are_422_and_nothing_is_stored(
    client: TestClient, auth: dict[str, str], session: Session, name: str
) -> None:
    make, word = HOSTILE[name]
    data = make()
    response = client.put(f"/api/v1/bundles/{digest_of(data)}", content=data, headers=auth)
    assert response.status_code == 422, response.text
    assert word in response.json()["message"]
    assert records(session) == 0
    assert not open_store().exists(bundle_key(digest_of(data)))
    assert spool_is_empty()


@pytest.mark.usefixtures("limits")
def test_too_many_files_is_422_naming_the_setting(
    client: TestClient, auth: dict[str, str], session: Session
) -> None:
    data = many_files(6)
    response = client.put(f"/api/v1/bundles/{digest_of(data)}", content=data, headers=auth)
    assert response.status_code == 422
    assert "COHORT_MAX_BUNDLE_FILES" in response.json()["message"]
    assert records(session) == 0


@pytest.mark.usefixtures("limits")
def test_a_body_past_the_size_limit_is_413_declared_or_streamed(
    client: TestClient, auth: dict[str, str], session: Session
) -> None:
    data = os.urandom(10_000)
    url = f"/api/v1/bundles/{digest_of(data)}"
    declared = client.put(url, content=data, headers=auth)
    assert declared.status_code == 413
    assert "over the limit of" in declared.json()["message"]

    def chunks() -> Iterator[bytes]:  # no Content-Length: chunked
        for start in range(0, len(data), 1000):
            yield data[start : start + 1000]

    streamed = client.put(url, content=chunks(), headers=auth)
    assert streamed.status_code == 413
    assert records(session) == 0
    assert spool_is_empty()


def test_a_job_can_name_only_its_projects_bundles(
    client: TestClient, auth: dict[str, str], session: Session
) -> None:
    data = good()
    digest = digest_of(data)
    spec = {
        "command": ["python", "train.py"],
        "bundle": digest,
        "replicas": 1,
        "strategy": "one_device",
    }
    missing = client.post("/api/v1/jobs", json=spec, headers=auth)
    assert missing.status_code == 404
    assert digest in missing.json()["message"] and "cohort job submit" in missing.json()["message"]
    assert client.put(f"/api/v1/bundles/{digest}", content=data, headers=auth).status_code == 201
    created = client.post("/api/v1/jobs", json=spec, headers=auth)
    assert created.status_code == 201, created.text
    assert created.json()["bundle"] == digest
    other = {"Authorization": f"Bearer {create_token(session, 'other')[0]}"}
    assert client.post("/api/v1/jobs", json=spec, headers=other).status_code == 404


def test_spool_files_left_by_a_dead_upload_are_cleared(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from services.jobs.uploads import clear_stale_uploads
    from services.settings import Settings

    data = tmp_path_factory.mktemp("data")
    monkeypatch.setenv("COHORT_DATA_DIR", str(data))
    settings = Settings()
    (data / "uploads").mkdir()
    old, fresh = data / "uploads" / "bundle-old.tar.gz", data / "uploads" / "bundle-new.tar.gz"
    old.write_bytes(b"x")
    fresh.write_bytes(b"y")
    os.utime(old, (0, 0))
    assert clear_stale_uploads(settings=settings) == 1
    assert not old.exists() and fresh.exists()


def test_uploads_hold_no_request_session() -> None:
    # A request session lives as long as the request: an upload would hold it (on SQLite,
    # with any write it made, the one write lock) while its body streams in and is checked
    # (tests/security/test_bundle_check_blocks_nothing.py on a real stack).
    from api.deps import get_db
    from tests.api.test_roles import app_routes

    def calls(route: Any) -> set[Any]:
        found, todo = set(), [route.dependant]
        while todo:
            dependant = todo.pop()
            found.add(dependant.call)
            todo.extend(dependant.dependencies)
        return found

    uploads = [
        route
        for route in app_routes()
        if "PUT" in (route.methods or ())
        and route.path in ("/api/v1/bundles/{digest}", "/api/v1/data/{path:path}")
    ]
    assert len(uploads) == 2
    for route in uploads:
        assert get_db not in calls(route), route.path
