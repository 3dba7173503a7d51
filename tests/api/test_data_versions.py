"""Data content digests (services/jobs/data_versions.py), as the data routes record them,
against a directory store and a real S3 server."""

from __future__ import annotations

import hashlib

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from services.auth.tokens import authenticate
from services.jobs.data_versions import content_digest, digest_of, newest_change
from services.storage import keys
from services.storage.store import open_store
from tests.factories import create_token


def sha(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


def project_of(session: Session, headers: dict[str, str]) -> int:
    return authenticate(session=session, token=headers["Authorization"][7:]).project_id


def test_digests_follow_uploads_deletes_and_files_changed_behind_cohorts_back(
    client: TestClient, auth: dict[str, str], session: Session, artifact_env: str
) -> None:
    del artifact_env  # a fresh store, local or S3
    project = project_of(session, auth)
    store = open_store()

    def version(path: str):  # noqa: ANN202 - a DataVersion or None
        return content_digest(session=session, store=store, project_id=project, path=path)

    assert version("digits") is None
    assert newest_change(session=session, project_id=project, path="digits") is None
    for name, body in [("digits/a.csv", b"a"), ("digits/b.csv", b"b"), ("digits_x/c", b"c")]:
        assert client.put(f"/api/v1/data/{name}", content=body, headers=auth).status_code == 201
    one = version("digits")
    # A prefix: its files' names and contents, and nothing of "digits_x" ('_' is no wildcard).
    assert one is not None and (one.files, one.size) == (2, 2)
    assert one.digest == digest_of([("a.csv", sha(b"a")), ("b.csv", sha(b"b"))])
    single = version("digits/a.csv")
    assert single is not None and single.digest == sha(b"a") and single.files == 1

    # The same bytes again: the same digest, but a newer change (a trigger settles on it).
    assert client.put("/api/v1/data/digits/a.csv", content=b"a", headers=auth).status_code == 200
    again = version("digits")
    assert again is not None and again.digest == one.digest
    assert again.updated_at > one.updated_at

    # New bytes, then a delete: each a new digest, and the delete a newer change.
    client.put("/api/v1/data/digits/a.csv", content=b"A", headers=auth)
    changed = version("digits")
    assert changed is not None and changed.digest not in {one.digest}
    assert client.delete("/api/v1/data/digits/b.csv", headers=auth).status_code == 204
    after_delete = version("digits")
    assert after_delete is not None and after_delete.files == 1
    assert after_delete.digest == digest_of([("a.csv", sha(b"A"))])
    assert after_delete.updated_at > changed.updated_at

    # Written to the store directly (no upload through the api): hashed from the store.
    store.put_bytes(keys.data_key(project, "digits/new.csv"), b"behind")
    behind = version("digits")
    assert behind is not None
    assert behind.digest == digest_of([("a.csv", sha(b"A")), ("new.csv", sha(b"behind"))])
    store.delete(keys.data_key(project, "digits/new.csv"))
    back = version("digits")
    assert back is not None and (back.digest, back.files) == (after_delete.digest, 1)


def test_another_projects_data_never_enters_a_digest(
    client: TestClient, auth: dict[str, str], session: Session, artifact_env: str
) -> None:
    del artifact_env
    other = {"Authorization": f"Bearer {create_token(session, 'other-data')[0]}"}
    client.put("/api/v1/data/shared/x.csv", content=b"mine", headers=auth)
    client.put("/api/v1/data/shared/y.csv", content=b"theirs", headers=other)
    mine = content_digest(
        session=session, store=open_store(), project_id=project_of(session, auth), path="shared"
    )
    assert mine is not None and mine.files == 1
    assert mine.digest == digest_of([("x.csv", sha(b"mine"))])
