"""The REST face of placement: the policy field, queue position, and the node list."""

from __future__ import annotations

import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from services.cluster.nodes import Heartbeat, record_heartbeat
from services.models import Job, utcnow
from services.scheduling import scheduler_pass
from services.settings import get_settings
from tests.factories import create_job, create_token


def test_placement_policy_is_stored_and_shown(client: TestClient, auth: dict[str, str]) -> None:
    job = client.post(
        "/api/v1/jobs", json={"replicas": 2, "placement": "spread"}, headers=auth
    ).json()
    assert job["placement"] == "spread"
    default = client.post("/api/v1/jobs", json={"replicas": 2}, headers=auth).json()
    assert default["placement"] is None


def test_bad_placement_is_422_naming_the_field(
    client: TestClient, auth: dict[str, str], session: Session
) -> None:
    before = session.execute(sa.select(sa.func.count()).select_from(Job)).scalar_one()
    response = client.post(
        "/api/v1/jobs", json={"replicas": 2, "placement": "scatter"}, headers=auth
    )
    assert response.status_code == 422, response.text
    body = response.json()
    assert [f["field"] for f in body["fields"]] == ["placement"]
    assert "'pack' or 'spread'" in body["message"]
    assert session.execute(sa.select(sa.func.count()).select_from(Job)).scalar_one() == before


def test_queued_job_shows_its_place_and_reason(
    client: TestClient, auth: dict[str, str], session: Session
) -> None:
    beats = [
        Heartbeat("n1", "10.3.0.1", 2, 0, utcnow()),
        Heartbeat("n2", "10.3.0.2", 2, 0, utcnow()),
    ]
    client.post("/api/v1/jobs", json={"replicas": 2}, headers=auth)
    scheduler_pass.run_pass(session=session, settings=get_settings(), heartbeats=beats)
    first = client.post("/api/v1/jobs", json={"replicas": 3}, headers=auth).json()
    second = client.post(
        "/api/v1/jobs", json={"replicas": 1, "strategy": "one_device"}, headers=auth
    ).json()
    scheduler_pass.run_pass(session=session, settings=get_settings(), heartbeats=[])
    one = client.get(f"/api/v1/jobs/{first['id']}", headers=auth).json()
    two = client.get(f"/api/v1/jobs/{second['id']}", headers=auth).json()
    assert one["status"] == "queued" and one["queue_position"] == 1
    assert one["reason"] == "needs 3 CPU slots on ≥2 nodes; 2 CPU slots free"
    assert two["queue_position"] == 2
    assert two["reason"].endswith(f"held for job {first['id']} ahead in the queue")


def test_nodes_show_gpus_and_only_own_replicas(
    client: TestClient, auth: dict[str, str], session: Session
) -> None:
    _, other = create_token(session, "other-project")
    theirs = create_job(session, other.project_id, replicas=1, strategy="one_device")
    mine = client.post(
        "/api/v1/jobs",
        json={"replicas": 1, "strategy": "one_device", "gpus_per_replica": 1},
        headers=auth,
    ).json()
    record_heartbeat(
        session=session, beat=Heartbeat("g9", "10.3.0.9", 2, 2, utcnow(), gpu_ids=(2, 3))
    )
    scheduler_pass.run_pass(session=session, settings=get_settings(), heartbeats=[])
    assert theirs.status.value == "scheduled"
    node = next(n for n in client.get("/api/v1/nodes", headers=auth).json() if n["id"] == "g9")
    assert node["gpu_ids"] == [2, 3] and node["free_gpus"] == 1
    assert node["running_replicas"] == 2 and node["free_slots"] == 1
    assert node["replicas"] == [f"{mine['id']}/1/0"]


def test_a_page_of_jobs_costs_the_same_queries_whatever_its_size(
    client: TestClient, auth: dict[str, str], session: Session
) -> None:
    """Replicas and queue places are read for the whole page at once (no query per job),
    and each queued job's place follows the placer's order: priority, then submission."""
    beats = [Heartbeat("n1", "10.3.1.1", 2, 0, utcnow())]
    running = client.post("/api/v1/jobs", json={"replicas": 2}, headers=auth).json()
    scheduler_pass.run_pass(session=session, settings=get_settings(), heartbeats=beats)
    queued = [
        client.post("/api/v1/jobs", json={"replicas": 2, "priority": p}, headers=auth).json()["id"]
        for p in (0, 5, 0, 5, 1, 0, 0, 0)
    ]
    statements: list[str] = []

    def count(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        statements.append(statement)

    engine = session.get_bind().engine
    sa.event.listen(engine, "before_cursor_execute", count)
    try:
        sizes = {}
        for limit in (2, 9):
            statements.clear()
            page = client.get(f"/api/v1/jobs?limit={limit}", headers=auth).json()["items"]
            sizes[limit] = len(statements)
            assert len(page) == limit
    finally:
        sa.event.remove(engine, "before_cursor_execute", count)
    assert sizes[2] == sizes[9]
    places = {job["id"]: job["queue_position"] for job in page}
    by_order = sorted(
        queued, key=lambda i: (-(5 if i in queued[1:4:2] else 1 if i == queued[4] else 0), i)
    )
    assert [places[i] for i in by_order] == list(range(1, 9))
    assert places[running["id"]] is None
    # Replica rows are made when a gang is placed: the running job's two, none queued.
    assert {job["id"]: len(job["replica_list"]) for job in page} == {
        running["id"]: 2,
        **dict.fromkeys(queued, 0),
    }
