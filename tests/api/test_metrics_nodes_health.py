import json

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from services.cluster.nodes import Heartbeat, record_heartbeat
from services.models import utcnow
from services.telemetry import metrics

SPEC = {"name": "digits", "replicas": 2}


def test_metrics_stored_once_and_filtered(client: TestClient, auth: dict[str, str],
                                          session: Session) -> None:
    job_id = client.post("/api/v1/jobs", json=SPEC, headers=auth).json()["id"]
    batch = json.dumps({"job_id": job_id, "attempt": 1, "replica": 0,
                        "points": [[s, 0, n, float(s), 1.0] for s in (1, 2, 3)
                                   for n in ("loss", "accuracy")]})
    rows = metrics.parse_batch(batch)
    assert metrics.store_points(session=session, rows=rows) == 6
    assert metrics.store_points(session=session, rows=rows) == 0  # redelivered: stored once
    orphan = metrics.parse_batch(json.dumps({"job_id": 10**9, "attempt": 1, "replica": 0,
                                             "points": [[1, 0, "loss", 1.0, 1.0]]}))
    assert metrics.store_points(session=session, rows=orphan) == 0
    url = f"/api/v1/jobs/{job_id}/metrics"
    everything = client.get(url, headers=auth).json()["items"]
    assert len(everything) == 6
    loss = client.get(url, params={"name": "loss", "since_step": 1}, headers=auth).json()["items"]
    assert [(p["step"], p["value"]) for p in loss] == [(2, 2.0), (3, 3.0)]
    assert client.get(url, params={"replica": 1}, headers=auth).json()["items"] == []


def test_nodes(client: TestClient, auth: dict[str, str], session: Session) -> None:
    record_heartbeat(session=session, beat=Heartbeat("n7", "10.0.0.7", 4, 0, utcnow()))
    nodes = client.get("/api/v1/nodes", headers=auth).json()
    node = next(n for n in nodes if n["id"] == "n7")
    assert node["address"] == "10.0.0.7"
    assert node["slots"] == 4 and node["free_slots"] == 4 and node["status"] == "ready"
    assert client.get("/api/v1/nodes").status_code == 401


def test_health(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json()["database"] == "ok" and ready.json()["redis"] == "ok"
