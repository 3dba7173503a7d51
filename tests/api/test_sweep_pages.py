"""The dashboard's sweep pages (HTML): the list, one sweep's trials sortable by the
objective, every trial's curve as chart data, the best trial's parameters and model."""

from __future__ import annotations

import json
import re
from typing import Any

import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from services.jobs.transitions import transition_job
from services.models import Job
from services.settings import get_settings
from services.statuses import JobStatus
from services.sweeps.advance import advance_sweeps
from services.telemetry.metrics import store_points
from tests.api.test_dashboard import login
from tests.api.test_sweeps import BODY
from tests.factories import create_token

# eval_accuracy of trials 0..2 at their last step; trial 3 has reported nothing yet.
FINAL = {0: 0.70, 1: 0.91, 2: 0.55}


def sweep_with_trials(client: TestClient, session: Session, token: str) -> dict[str, Any]:
    """A running 2 x 2 grid sweep (learning_rate x width): trials 0..2 succeeded with
    an eval_accuracy curve each, trial 3 still queued."""
    response = client.post(
        "/api/v1/sweeps",
        json={**BODY, "max_concurrent": 4},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status_code == 201, response.text
    advance_sweeps(session=session, settings=get_settings())
    trials = {
        job.trial_index: job
        for job in session.execute(
            sa.select(Job).where(Job.sweep_id == response.json()["id"])
        ).scalars()
    }
    assert sorted(trials) == [0, 1, 2, 3]
    for index, final in FINAL.items():
        job = trials[index]
        store_points(
            session=session,
            rows=[
                {
                    "job_id": job.id,
                    "attempt": 1,
                    "replica": 0,
                    "step": step,
                    "epoch": 0,
                    "name": "eval_accuracy",
                    "value": final * step / 3,
                    "ts": 100.0 + step,
                }
                for step in (1, 2, 3)
            ],
        )
        for target in (JobStatus.SCHEDULED, JobStatus.RUNNING, JobStatus.SUCCEEDED):
            transition_job(session=session, job_id=job.id, target=target)
    return {
        "id": response.json()["id"],
        "jobs": {i: j.id for i, j in trials.items()},
        "hyperparameters": {i: j.hyperparameters for i, j in trials.items()},
    }


def row_order(page: str) -> list[int]:
    body = page.split('<table class="trials"', 1)[1]
    return [int(job_id) for job_id in re.findall(r'<tr data-job-id="(\d+)"', body)]


def test_a_sweeps_page_shows_trials_best_model_and_curves(
    client: TestClient, session: Session
) -> None:
    token, _ = create_token(session, "sweeper")
    sweep = sweep_with_trials(client, session, token)
    jobs = sweep["jobs"]
    login(client, token)

    listed = client.get("/sweeps").text
    assert f'<a href="/sweeps/{sweep["id"]}">#{sweep["id"]} lr-width</a>' in listed
    assert 'href="/sweeps" aria-current="page"' in listed

    page = client.get(f"/sweeps/{sweep['id']}").text
    assert "<dt>Search</dt><dd>grid</dd>" in page
    # Parameters as columns; the best so far (trial 1, with its job's parameters).
    assert '<th scope="col">learning_rate</th><th scope="col">width</th>' in page
    best = page.split('id="best"', 1)[1].split("</section>", 1)[0]
    assert f'href="/jobs/{jobs[1]}">trial 1 · job #{jobs[1]}</a>' in best
    assert "<strong>0.91</strong>" in best
    lr, width = (sweep["hyperparameters"][1][k] for k in ("learning_rate", "width"))
    assert (
        f"<dt>learning_rate</dt><dd>{lr}</dd>" in best and f"<dt>width</dt><dd>{width}</dd>" in best
    )
    assert f"/api/v1/jobs/{jobs[1]}/artifacts/download?path=model" in best
    assert f'<tr data-job-id="{jobs[1]}" data-status="succeeded" class="best">' in page
    # One curve per trial that reported the objective, the best one marked.
    curves = json.loads(re.search(r'id="sweep-curves">(.*?)</script>', page, re.S).group(1))
    assert {c["job_id"]: c["best"] for c in curves} == {
        jobs[0]: False,
        jobs[1]: True,
        jobs[2]: False,
    }
    assert [p[0] for p in curves[0]["points"]] == [1, 2, 3]
    assert "/static/sweep.js" in page and "/static/vendor/uPlot.iife.min.js" in page

    # Sorted by the objective: best first, then worst first; no value comes last.
    assert row_order(page) == [jobs[0], jobs[1], jobs[2], jobs[3]]
    by_best = client.get(f"/sweeps/{sweep['id']}?sort=objective").text
    assert row_order(by_best) == [jobs[1], jobs[0], jobs[2], jobs[3]]
    assert f'href="/sweeps/{sweep["id"]}?sort=-objective"' in by_best
    by_worst = client.get(f"/sweeps/{sweep['id']}?sort=-objective").text
    assert row_order(by_worst) == [jobs[2], jobs[0], jobs[1], jobs[3]]
    fragment = client.get(f"/partials/sweeps/{sweep['id']}?sort=objective").text
    assert row_order(fragment) == row_order(by_best) and "<html" not in fragment
    bad = client.get(f"/sweeps/{sweep['id']}?sort=speed")
    assert bad.status_code == 422 and bad.json()["fields"][0]["field"] == "sort"


def test_another_projects_sweep_is_a_404_page(client: TestClient, session: Session) -> None:
    owner, _ = create_token(session, "owner")
    sweep = sweep_with_trials(client, session, owner)
    other, _ = create_token(session, "other")
    login(client, other)
    page = client.get(f"/sweeps/{sweep['id']}")
    assert page.status_code == 404 and f"Sweep {sweep['id']} not found" in page.text
    assert client.get(f"/partials/sweeps/{sweep['id']}").status_code == 404
    assert "No sweeps yet" in client.get("/sweeps").text
    assert client.get("/sweeps", follow_redirects=False).status_code == 200
    client.cookies.clear()
    assert client.get("/sweeps", follow_redirects=False).status_code == 303
    assert client.get(f"/partials/sweeps/{sweep['id']}").status_code == 401
