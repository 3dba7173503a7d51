"""The scaling report where users read it: `GET /api/v1/jobs/{id}` and the job page."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from tests.api.test_dashboard import login
from tests.factories import create_job, create_token
from tests.services.test_scaling import finished


def test_a_finished_job_reads_with_its_scaling_report(client: TestClient, session: Session) -> None:
    token, row = create_token(session, "scaling")
    base = finished(session, row.project_id, 1, step_time=0.1)
    job = finished(session, row.project_id, 2, step_time=0.125)
    running = create_job(session, row.project_id, name="still-queued")
    auth = {"Authorization": f"Bearer {token}"}
    body = client.get(f"/api/v1/jobs/{job.id}", headers=auth).json()
    assert body["scaling"] == {
        "per_replica_examples_per_second": 256.0,
        "total_examples_per_second": 512.0,
        "baseline_job_id": base.id,
        "efficiency": 0.8,
        "note": body["scaling"]["note"],
    }
    assert client.get(f"/api/v1/jobs/{running.id}", headers=auth).json()["scaling"] is None
    login(client, token)
    page = client.get(f"/jobs/{job.id}").text
    assert "256.0 examples/s per replica" in page and "512.0 in total" in page
    assert f'efficiency <strong>80%</strong> against\n    <a href="/jobs/{base.id}">' in page
    assert 'id="scaling"' not in client.get(f"/jobs/{running.id}").text
