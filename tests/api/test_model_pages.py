"""The dashboard's model pages: the project's models, one model with its versions'
lineage, links to their jobs, aliases and every move; another project's model is 404."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from services.registry import aliases, versions
from services.storage.store import open_store
from tests.api.test_dashboard import login
from tests.api.test_models import trained
from tests.factories import create_token


@pytest.mark.parametrize("path", ["/models", "/models/digits"])
def test_model_pages_redirect_to_login_without_a_cookie(client: TestClient, path: str) -> None:
    response = client.get(path, follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"].startswith("/login")


@pytest.mark.parametrize("artifact_env", ["local"], indirect=True)
def test_a_models_page_shows_lineage_links_and_alias_history(
    client: TestClient,
    session: Session,
    artifact_env: str,  # noqa: ARG001
) -> None:
    token, row = create_token(session, "alpha")
    other_token, other = create_token(session, "beta")
    first, second = trained(session, token, accuracy=0.875), trained(session, token)
    for job in (first, second):
        versions.register_version(
            session=session,
            project_id=row.project_id,
            name="digits",
            job_id=job.id,
            by="token ci (id 1)",
            store=open_store(),
            look_for_model=False,
        )
    model = versions.read_model(session=session, project_id=row.project_id, name="digits")
    for version, reason in ((2, "first serving model"), (1, "rollback: v2 drifts")):
        aliases.move_alias(
            session=session,
            model=model,
            alias="production",
            version=version,
            by="token ops (id 2)",
            reason=reason,
        )
    theirs = trained(session, other_token)
    versions.register_version(
        session=session,
        project_id=other.project_id,
        name="secret-model",
        job_id=theirs.id,
        by="t",
        store=open_store(),
        look_for_model=False,
    )
    login(client, token)

    listed = client.get("/models")
    assert listed.status_code == 200
    assert 'href="/models/digits"' in listed.text and "production → v1" in listed.text
    assert "secret-model" not in listed.text
    assert 'href="/models"' in listed.text and 'aria-current="page"' in listed.text

    page = client.get("/models/digits").text
    assert f'href="/jobs/{first.id}"' in page and f'href="/jobs/{second.id}"' in page
    assert "eval_accuracy=0.875" in page and "learning_rate=0.05" in page
    assert "data/digits/train.npz" in page
    assert "rollback: v2 drifts" in page and "first serving model" in page
    assert page.index("rollback: v2 drifts") < page.index("first serving model")  # newest first
    assert "token ops (id 2)" in page
    assert "/api/v1/models/digits/versions/1/files/download" in page

    assert client.get("/models/secret-model").status_code == 404
    assert f"/jobs/{theirs.id}" not in client.get("/models/secret-model").text
