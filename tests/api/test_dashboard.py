"""The dashboard's server side: login cookie, redirects, project isolation, fragments,
bundled assets. The browser behaviour is tested in tests/e2e/test_dashboard.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from services.cluster.nodes import Heartbeat, record_heartbeat
from services.jobs.transitions import note_job
from services.models import Bundle, MetricPoint, utcnow
from services.statuses import NodeCordon
from services.storage import keys
from services.storage.store import open_store
from tests.factories import create_job, create_token

API = Path(__file__).resolve().parents[2] / "api"


def login(client: TestClient, token: str) -> None:
    response = client.post("/login", data={"token": token, "next": "/"}, follow_redirects=False)
    assert response.status_code == 303, response.text


@pytest.mark.parametrize("path", ["/", "/jobs/1", "/cluster", "/schedules"])
def test_pages_redirect_to_login_without_a_valid_cookie(client: TestClient, path: str) -> None:
    response = client.get(path, follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"].startswith("/login?next=/")
    client.cookies.set("cohort_session", "not-a-session")
    assert client.get(path, follow_redirects=False).status_code == 303


@pytest.mark.parametrize("path", ["/partials/jobs", "/partials/jobs/1"])
def test_fragments_answer_401_without_a_valid_cookie(client: TestClient, path: str) -> None:
    # The page's script goes to the login form on a 401; a redirect would be followed
    # and the login form's HTML pasted into the page.
    assert client.get(path, follow_redirects=False).status_code == 401
    client.cookies.set("cohort_session", "not-a-session")
    assert client.get(path, follow_redirects=False).status_code == 401


def test_login_sets_an_httponly_strict_session_cookie_and_logout_ends_it(
    client: TestClient, token: str
) -> None:
    response = client.post(
        "/login", data={"token": token, "next": "/cluster"}, follow_redirects=False
    )
    assert response.status_code == 303 and response.headers["location"] == "/cluster"
    cookie = response.headers["set-cookie"]
    session_id = cookie.split(";")[0].removeprefix("cohort_session=")
    assert cookie.startswith("cohort_session=") and token not in cookie
    assert len(session_id) >= 40
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    assert "Max-Age=43200" in cookie  # COHORT_SESSION_LIFETIME's default, 12 h
    assert client.get("/cluster").status_code == 200
    response = client.post("/logout", follow_redirects=False)
    assert response.headers["location"] == "/login"
    assert 'cohort_session=""' in response.headers["set-cookie"]
    assert client.get("/", follow_redirects=False).status_code == 303
    # The id is worthless once logged out, even to a client that kept it.
    client.cookies.set("cohort_session", session_id)
    assert client.get("/", follow_redirects=False).status_code == 303
    assert client.get("/api/v1/jobs").status_code == 401


def test_a_wrong_token_is_refused_with_the_message_next_to_the_field(client: TestClient) -> None:
    response = client.post("/login", data={"token": "nope"}, follow_redirects=False)
    assert response.status_code == 401
    assert "set-cookie" not in response.headers
    assert 'id="token-error"' in response.text and "unknown token" in response.text
    assert 'aria-describedby="token-error"' in response.text


@pytest.mark.parametrize("target", ["//evil.example/x", "https://evil.example/", "/\\evil"])
def test_login_never_redirects_off_site(client: TestClient, token: str, target: str) -> None:
    response = client.post("/login", data={"token": token, "next": target}, follow_redirects=False)
    assert response.headers["location"] == "/"


def test_the_rest_api_accepts_the_login_cookie(client: TestClient, token: str) -> None:
    assert client.get("/api/v1/jobs").status_code == 401
    login(client, token)
    response = client.post(
        "/api/v1/jobs", json={"name": "from-cookie", "replicas": 1, "strategy": "one_device"}
    )
    assert response.status_code == 201
    assert client.get("/api/v1/jobs").json()["items"][0]["name"] == "from-cookie"


def test_jobs_page_lists_own_project_only_with_last_metrics(
    client: TestClient, session: Session
) -> None:
    token, row = create_token(session, "alpha")
    _, other = create_token(session, "beta")
    mine = create_job(session, row.project_id, name="mine-job")
    theirs = create_job(session, other.project_id, name="their-job")
    session.add_all(
        [
            MetricPoint(
                job_id=mine.id, attempt=1, replica=r, step=s, epoch=0, name="loss", value=v, ts=0.0
            )
            for r, s, v in [(0, 1, 9.0), (0, 2, 0.5), (1, 2, 0.25)]
        ]
    )
    # Another attempt's points are not the current attempt's last loss.
    session.add(
        MetricPoint(
            job_id=mine.id, attempt=2, replica=0, step=9, epoch=0, name="loss", value=7.0, ts=0.0
        )
    )
    session.flush()
    login(client, token)
    page = client.get("/").text
    assert "mine-job" in page and "their-job" not in page
    assert "0.3750" in page and "7.0000" not in page  # mean of both replicas, last step
    assert client.get(f"/jobs/{theirs.id}").status_code == 404
    assert client.get(f"/partials/jobs/{theirs.id}").status_code == 404
    job_page = client.get(f"/jobs/{mine.id}")
    assert job_page.status_code == 200 and "mine-job" in job_page.text
    assert 'id="cancel-btn"' in job_page.text
    assert not re.search(r'id="cancel-btn"[^>]*disabled', job_page.text)


def test_filters_and_cursor_pagination(client: TestClient, session: Session) -> None:
    token, row = create_token(session, "paged")
    ids = [create_job(session, row.project_id, name=f"p{i}").id for i in range(27)]
    login(client, token)
    first = client.get("/partials/jobs").text
    assert f"#{ids[-1]} p26" in first and f"#{ids[1]} p1<" not in first
    cursor = re.search(r'cursor=([^"]+)"', first)
    assert cursor, "no link to older jobs"
    older = client.get("/partials/jobs?cursor=" + cursor.group(1).replace("&amp;", "&")).text
    assert f"#{ids[0]} p0<" in older and f"#{ids[-1]} p26" not in older
    assert f"#{ids[3]} p3<" in client.get("/?q=p3").text
    # What the filter form and the live refresh send for "any status", "no text".
    assert f"#{ids[-1]} p26" in client.get("/partials/jobs?status=&q=&cursor=").text
    assert f"#{ids[-1]} p26" in client.get("/?status=&q=").text
    assert "No jobs match" in client.get("/?status=running").text
    # A bad status is the caller's error, answered as JSON naming the field.
    bad = client.get("/?status=sleeping")
    assert bad.status_code == 422 and bad.json()["fields"][0]["field"] == "status"


def test_cluster_page_shows_the_queue_with_reasons(client: TestClient, session: Session) -> None:
    token, row = create_token(session, "queued")
    job = create_job(session, row.project_id, name="waiting-job")
    job.reason = "needs 2 free slots; 0 free"
    session.flush()
    login(client, token)
    page = client.get("/cluster").text
    assert "waiting-job" in page and "needs 2 free slots; 0 free" in page
    assert "No node agent has registered yet" in page


def test_cluster_page_shows_each_gpu_model_and_memory(client: TestClient, session: Session) -> None:
    token, _row = create_token(session, "gpus")
    record_heartbeat(
        session=session,
        beat=Heartbeat(
            "gpu-node",
            "10.0.0.9",
            2,
            2,
            utcnow(),
            gpu_ids=(0, 1),
            gpu_models=(("NVIDIA A100-SXM4-40GB", 40960), ("NVIDIA A100-SXM4-40GB", 40960)),
        ),
    )
    login(client, token)
    page = client.get("/cluster").text
    row = page[page.index("gpu-node") :]
    row = row[: row.index("</tr>")]
    assert row.count("NVIDIA A100-SXM4-40GB") == 2 and row.count("40.0 GiB") == 2


def test_cluster_page_shows_a_drained_node_and_why(client: TestClient, session: Session) -> None:
    from services.cluster import drains

    token, _row = create_token(session, "drains")
    record_heartbeat(session=session, beat=Heartbeat("drained-node", "10.0.0.11", 2, 0, utcnow()))
    drains.drain_node(
        session=session, node_id="drained-node", reason="kernel upgrade (by ops)", at=utcnow()
    )
    login(client, token)
    page = client.get("/cluster").text
    row = page[page.index("drained-node") :]
    row = row[: row.index("</tr>")]
    assert ">drained</span>" in row and "kernel upgrade (by ops)" in row


def test_cluster_page_shows_a_quarantined_node_and_why(
    client: TestClient, session: Session
) -> None:
    token, _row = create_token(session, "quarantine")
    node = record_heartbeat(session=session, beat=Heartbeat("bad-node", "10.0.0.7", 2, 0, utcnow()))
    node.cordon = NodeCordon.QUARANTINE
    node.cordon_reason = "quarantined: 3 replicas failed or straggled here within 3600 s (...)"
    session.flush()
    login(client, token)
    page = client.get("/cluster").text
    row = page[page.index("bad-node") :]
    row = row[: row.index("</tr>")]
    assert ">quarantined</span>" in row and "3 replicas failed or straggled here" in row


def test_the_job_page_names_a_straggler_in_its_events(client: TestClient, session: Session) -> None:
    token, row = create_token(session, "straggling")
    job = create_job(session, row.project_id, name="straggling", replicas=2)
    reason = "replica 1 on node n1 is a straggler: busy 30.0 ms a step against its peers'"
    assert note_job(session=session, job_id=job.id, attempt=job.attempt, reason=reason)
    login(client, token)
    page = client.get(f"/jobs/{job.id}").text
    assert reason.replace("'", "&#39;") in page


def test_assets_are_bundled_and_nothing_loads_from_the_network(
    client: TestClient, token: str
) -> None:
    for asset in (
        "/static/dashboard.js",
        "/static/job.js",
        "/static/dashboard.css",
        "/static/vendor/uPlot.iife.min.js",
        "/static/vendor/uPlot.min.css",
    ):
        assert client.get(asset).status_code == 200, asset
    login(client, token)
    html = client.get("/").text + client.get("/cluster").text
    for source in [
        html,
        *(p.read_text() for p in (API / "templates").glob("*.html")),
        *(p.read_text() for p in (API / "static").glob("*.*")),
    ]:
        assert not re.search(r"""(src|href)=["']?(https?:)?//""", source)
        assert "cdn" not in source.lower()


def test_the_job_page_carries_a_spec_that_resubmits_as_is(
    client: TestClient, session: Session
) -> None:
    token, row = create_token(session, "again")
    job = create_job(
        session,
        row.project_id,
        name="again",
        replicas=1,
        strategy="one_device",
        hyperparameters={"epochs": 2, "hidden_units": 8},
    )
    login(client, token)
    page = client.get(f"/jobs/{job.id}").text
    spec = json.loads(re.search(r'id="job-spec">(.*?)</script>', page, re.S).group(1))
    response = client.post("/api/v1/jobs", json=spec)
    assert response.status_code == 201, response.text
    assert response.json()["hyperparameters"]["hidden_units"] == 8
    assert response.json()["id"] != job.id


def test_the_job_page_says_how_a_command_reports_metrics_where_its_charts_would_be(
    client: TestClient, session: Session
) -> None:
    token, row = create_token(session, "silent")
    job = create_job(session, row.project_id, command=["python", "train.py"])
    login(client, token)
    page = client.get(f"/jobs/{job.id}").text
    hint = re.search(r'<p id="no-metrics"[^>]*data-finished="([^"]*)"', page, re.S)
    assert hint is not None, page
    assert hint.group(1) == (
        f"job {job.id} reported no metrics: write TensorBoard scalars under "
        "$COHORT_TENSORBOARD_DIR or call cohort.report()"
    )


@pytest.mark.usefixtures("artifact_env")
@pytest.mark.parametrize("artifact_env", ["local"], indirect=True)
def test_the_job_page_lists_artifacts_by_group_with_download_links(
    client: TestClient, session: Session
) -> None:
    token, row = create_token(session, "artifacts")
    job = create_job(session, row.project_id, name="with-files", replicas=1, strategy="one_device")
    other = create_job(session, row.project_id, name="no-files", replicas=1, strategy="one_device")
    store = open_store()
    files = {
        "model/saved_model.pb": b"m" * 2048,
        "model/variables/v.index": b"i",
        "checkpoints/ckpt-1.index": b"c",
        "tensorboard/replica-0/events.out": b"e",
        "logs/attempt-1/replica-0.log": b"hello\n",
        "notes/extra.txt": b"x",
    }
    for path, data in files.items():
        store.put_bytes(f"{keys.job_prefix(job.id)}/{path}", data)
    login(client, token)
    for page in (client.get(f"/jobs/{job.id}").text, client.get(f"/partials/jobs/{job.id}").text):
        groups = re.findall(r'<tbody data-group="(\w+)">', page)
        assert groups == ["model", "checkpoints", "tensorboard", "logs", "other"]
        links = re.findall(r'href="(/api/v1/jobs/\d+/artifacts/download\?path=[^"]+)"', page)
        for path in files:
            assert f"/api/v1/jobs/{job.id}/artifacts/download?path={path}" in links, path
        assert "2.0 KiB" in page
        # How to open the TensorBoard files (and the profiles among them).
        assert f"open in TensorBoard with <code>cohort tensorboard {job.id}</code>" in page
    # The links work with the login cookie alone: a file as it is, a group as a .tar.gz.
    log = client.get(f"/api/v1/jobs/{job.id}/artifacts/download?path=logs/attempt-1/replica-0.log")
    assert log.status_code == 200 and log.content == b"hello\n"
    model = client.get(f"/api/v1/jobs/{job.id}/artifacts/download?path=model")
    assert model.status_code == 200 and model.headers["content-type"] == "application/gzip"
    assert "None yet" in client.get(f"/jobs/{other.id}").text
    # Before it has any file, the job's page says how to follow it in TensorBoard.
    assert f"<code>cohort tensorboard {other.id}</code>" in client.get(f"/jobs/{other.id}").text


@pytest.mark.usefixtures("artifact_env")
@pytest.mark.parametrize("artifact_env", ["local"], indirect=True)
def test_a_command_jobs_page_shows_its_command_bundle_env_and_inputs(
    client: TestClient, session: Session
) -> None:
    token, row = create_token(session, "commands")
    open_store().put_bytes(keys.data_key(row.project_id, "digits/train.csv"), b"x,y\n")
    digest = "sha256:" + "ab" * 32
    session.add(Bundle(project_id=row.project_id, digest=digest, size=1, files=1))
    session.flush()
    job = create_job(
        session,
        row.project_id,
        name="scripted",
        replicas=1,
        strategy="one_device",
        bundle=digest,
        command=["python", "train.py", "--note", "two words"],
        env={"DATA_URI": "s3://bucket/x.csv"},
        inputs={"train.csv": "data/digits/train.csv"},
    )
    login(client, token)
    page = client.get(f"/jobs/{job.id}").text
    assert ">None<" not in page
    assert "python train.py --note &#39;two words&#39;" in page
    assert digest[:19] in page and "DATA_URI=s3://bucket/x.csv" in page
    assert "train.csv</code> ← <code>data/digits/train.csv" in page
    # Resubmit sends the same command, bundle, env and inputs back.
    spec = json.loads(re.search(r'id="job-spec">(.*?)</script>', page, re.S).group(1))
    again = client.post("/api/v1/jobs", json=spec)
    assert again.status_code == 201, again.text
    assert {k: again.json()[k] for k in ("command", "bundle", "env", "inputs", "trainer")} == {
        "command": job.command,
        "bundle": digest,
        "env": job.env,
        "inputs": job.inputs,
        "trainer": None,
    }
