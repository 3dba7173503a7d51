"""At-least-once delivery, a Redis restart mid-job, and an API restart under retried POSTs."""

from __future__ import annotations

import dataclasses
import json
import threading
import time

import httpx
import pytest
import redis

from services.wire.keys import EVENTS_STREAM
from services.wire.replica import START_TASK, ReplicaSpec, StartReplica
from services.wire.signing import node_key, seal_message
from tests.e2e.conftest import wait_for, wait_terminal
from tests.faults.conftest import LONG_JOB, record, steps_seen
from workers.celery_app import make_celery

pytestmark = pytest.mark.e2e


def started_events(stack, job_id: int) -> list[tuple[int, int]]:  # type: ignore[no-untyped-def]
    client = redis.Redis.from_url(stack.settings.redis_url, decode_responses=True)
    found = []
    for _id, fields in client.xrange(EVENTS_STREAM):
        data = json.loads(fields["data"])
        if fields["kind"] == "replica_started" and data["job_id"] == job_id:
            found.append((data["attempt"], data["index"]))
    return found


def test_duplicate_and_stale_start_messages_start_nothing(make_stack) -> None:  # type: ignore[no-untyped-def]
    stack, client = make_stack()
    job = client.submit({**LONG_JOB, "hyperparameters": {"epochs": 3, "steps_per_epoch": 100}})
    running = wait_for(lambda: (j := client.job(job["id"]))["status"] == "running" and j, 120,
                       "the job to run")
    replica = running["replica_list"][0]
    start = StartReplica("node-a", ReplicaSpec(job["id"], 1, 0, 2, "mlp_digits",
                                               "multi_worker_mirrored",
                                               running["hyperparameters"]),
                         tf_config=replica["tf_config"],
                         port=int(replica["address"].rsplit(":", 1)[1]))
    stale = dataclasses.replace(start, spec=dataclasses.replace(start.spec, attempt=7))
    app = make_celery(stack.settings.redis_url)
    key = node_key(stack.env["COHORT_SIGNING_KEY"], "node-a")
    # Redelivered twice, and once as a message of an attempt that is not current (each
    # signed as the scheduler signs them: the fencing, not the signature, is under test).
    for message in (start, start, stale):
        app.send_task(START_TASK, args=[seal_message(key, message)], queue="node.node-a")
    final = wait_terminal(client, job["id"])
    assert final["status"] == "succeeded", final["reason"]
    assert sorted(started_events(stack, job["id"])) == [(1, 0), (1, 1)]
    record("start message delivered twice, and one of a stale attempt",
           "claim (SET NX) per (job, attempt, replica) and current-attempt check: ignored",
           0.0, 0.0, "nothing")


def test_redis_restart_mid_job(make_stack) -> None:  # type: ignore[no-untyped-def]
    stack, client = make_stack()
    job = client.submit(LONG_JOB)
    wait_for(lambda: max(steps_seen(client, job["id"], 1) or [0]) >= 100, 120, "training")
    down_at = time.time()
    stack.kill("redis")  # SIGKILL; it keeps nothing on disk, so it comes back empty
    stack.restart("redis")
    before = len(client.metrics(job["id"], limit=100_000))

    def recovered() -> bool:
        # Agents heartbeat again, and new metric points reach SQL again.
        import datetime as dt

        beats = [dt.datetime.fromisoformat(n["last_heartbeat"]).timestamp()
                 for n in client.nodes()]
        return bool(beats) and min(beats) > down_at and \
            len(client.metrics(job["id"], limit=100_000)) > before

    wait_for(recovered, 120, "heartbeats and metric ingest after the restart")
    recovered_at = time.time()
    final = wait_terminal(client, job["id"], timeout=300)
    events = client.events(job["id"])
    assert final["status"] == "succeeded", [(e["to_status"], e["reason"]) for e in events]
    # The replicas kept training through the outage; their metric points waited in
    # their buffers and reached SQL afterwards.
    steps = steps_seen(client, job["id"], final["attempt"])
    assert max(steps) == 600
    lost = 600 - len(set(steps)) if final["attempt"] == 1 else None
    record("Redis killed and restarted empty mid-job",
           "agents re-register, the scheduler re-takes its lock and re-reads SQL, replicas "
           f"flush buffered metrics; job finished in attempt {final['attempt']}",
           None, recovered_at - down_at,
           f"{lost} metric steps" if lost is not None else "a restart")
    if final["attempt"] == 1:
        assert lost == 0


def test_api_restart_under_retried_submissions(make_stack) -> None:  # type: ignore[no-untyped-def]
    stack, client = make_stack()
    spec = {"name": "x", "replicas": 64}  # never fits: stays queued, spares the CPUs
    acknowledged: dict[str, int] = {}
    errors: list[str] = []

    def submit(keys: list[str]) -> None:
        http = httpx.Client(base_url=stack.url, timeout=5.0,
                            headers={"Authorization": f"Bearer {stack.token}"})
        for key in keys:
            deadline = time.monotonic() + 60
            while True:
                try:
                    response = http.post("/api/v1/jobs", json={**spec, "name": key},
                                         headers={"Idempotency-Key": key})
                    if response.status_code == 201:
                        acknowledged[key] = response.json()["id"]
                        break
                    if response.status_code < 500:
                        errors.append(f"{key}: {response.status_code} {response.text}")
                        break
                except httpx.HTTPError:
                    pass  # the API is down: retry, as a client with a key may
                if time.monotonic() > deadline:
                    errors.append(f"{key}: gave up")
                    break
                time.sleep(0.05)

    keys = [f"key-{i:03d}" for i in range(200)]
    threads = [threading.Thread(target=submit, args=(keys[i::4],)) for i in range(4)]
    for thread in threads:
        thread.start()
    wait_for(lambda: len(acknowledged) >= 50, 60, "50 acknowledged submissions", interval=0.05)
    down_at = time.time()
    stack.kill("api")
    stack.restart("api")
    client.wait_ready(timeout=60)
    back_at = time.time()
    for thread in threads:
        thread.join()
    assert not errors, errors[:5]
    assert len(acknowledged) == 200
    names: list[str] = []
    cursor = None
    while True:
        page = client.jobs(limit=500, **({"cursor": cursor} if cursor else {}))
        names += [item["name"] for item in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert sorted(names) == keys  # every acknowledged job exactly once, nothing else
    record("API killed and restarted during 200 retried submissions",
           "clients retry with Idempotency-Key; each key stored once", None,
           back_at - down_at, "nothing: 200 acknowledged, 200 stored, 0 duplicates")


def test_scheduler_restart_mid_job(make_stack) -> None:  # type: ignore[no-untyped-def]
    stack, client = make_stack()
    job = client.submit({**LONG_JOB, "hyperparameters": {"epochs": 4, "steps_per_epoch": 100}})
    wait_for(lambda: max(steps_seen(client, job["id"], 1) or [0]) >= 100, 120, "training")
    down_at = time.time()
    stack.kill("scheduler")  # SIGKILL: its lock expires, its unacknowledged events wait
    queued = client.submit({"name": "while-down", "replicas": 64})  # committed, not placed
    stack.restart("scheduler")
    # The job submitted while no scheduler ran is seen from SQL and given a reason.
    waiting = wait_for(lambda: (j := client.job(queued["id"]))["reason"].startswith(
        "unschedulable") and j, 60, "the scheduler to look at the new job")
    back_at = time.time()
    assert waiting["status"] == "queued"
    final = wait_terminal(client, job["id"], timeout=300)
    assert final["status"] == "succeeded", final["reason"]
    assert final["attempt"] == 1  # the gang never noticed
    assert max(steps_seen(client, job["id"], 1)) == 400
    record("scheduler killed (SIGKILL) and restarted mid-job",
           "the new scheduler takes the lock when the old one's expires, re-reads SQL and its "
           "unacknowledged events; the running gang is untouched",
           None, back_at - down_at, "nothing")
