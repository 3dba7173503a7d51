import json

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from services.cluster.nodes import Heartbeat, record_heartbeat
from services.models import utcnow
from services.telemetry import metrics

SPEC = {"name": "digits", "replicas": 2}


def test_metrics_stored_once_and_filtered(
    client: TestClient, auth: dict[str, str], session: Session
) -> None:
    job_id = client.post("/api/v1/jobs", json=SPEC, headers=auth).json()["id"]
    batch = json.dumps(
        {
            "job_id": job_id,
            "attempt": 1,
            "replica": 0,
            "points": [[s, 0, n, float(s), 1.0] for s in (1, 2, 3) for n in ("loss", "accuracy")],
        }
    )
    rows = metrics.parse_batch(batch)
    assert metrics.store_points(session=session, rows=rows) == 6
    assert metrics.store_points(session=session, rows=rows) == 0  # redelivered: stored once
    orphan = metrics.parse_batch(
        json.dumps(
            {"job_id": 10**9, "attempt": 1, "replica": 0, "points": [[1, 0, "loss", 1.0, 1.0]]}
        )
    )
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


def test_nodes_show_each_gpu_model_and_memory(
    client: TestClient, auth: dict[str, str], session: Session
) -> None:
    beat = Heartbeat(
        "g7",
        "10.0.0.8",
        2,
        3,
        utcnow(),
        gpu_ids=(2, 0, 1),
        gpu_models=(("NVIDIA A100-SXM4-40GB", 40960), ("Tesla T4", 15360)),
    )
    record_heartbeat(session=session, beat=beat)
    node = next(n for n in client.get("/api/v1/nodes", headers=auth).json() if n["id"] == "g7")
    assert node["gpu_ids"] == [0, 1, 2]
    assert node["gpu_devices"] == [  # in id order; an older agent's GPU without a model
        {"index": 0, "name": "Tesla T4", "memory_mb": 15360},
        {"index": 1, "name": "", "memory_mb": 0},
        {"index": 2, "name": "NVIDIA A100-SXM4-40GB", "memory_mb": 40960},
    ]
    # A new beat replaces what the node had.
    later = Heartbeat(
        "g7",
        "10.0.0.8",
        2,
        1,
        utcnow(),
        gpu_ids=(0,),
        gpu_models=(("NVIDIA H100 80GB HBM3", 81559),),
    )
    record_heartbeat(session=session, beat=later)
    node = next(n for n in client.get("/api/v1/nodes", headers=auth).json() if n["id"] == "g7")
    assert node["gpu_devices"] == [
        {"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_mb": 81559}
    ]


def test_health(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json()["database"] == "ok" and ready.json()["redis"] == "ok"
