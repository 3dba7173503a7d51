"""PostgreSQL restarted mid-run: on a server of the test's own (tests/pgserver.py), never the
machine's shared one."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
import redis

from services.statuses import TERMINAL_STATUSES
from services.wire.keys import METRICS_STREAM
from tests.capabilities import need_postgres_server
from tests.e2e.conftest import free_port, job_story, wait_for, wait_terminal
from tests.e2e.stepper import stepping_job
from tests.faults.conftest import GANG, record, steps_seen
from tests.faults.nothing_lost import assert_nothing_lost
from tests.pgserver import PostgresServer, postgres_server
from workers.control.streams import GROUP

pytestmark = pytest.mark.e2e

# Steppers (tests/e2e/stepper.py) for 20 s: the outage comes 2.5 s in and lasts 6 s.
STEPS = 400
OUTAGE_S = 6.0


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    need_postgres_server()
    with postgres_server(free_port()) as server:
        yield server


# own_postgres first: the stack is stopped before its database server.
def test_postgres_restart_mid_job(own_postgres: PostgresServer, make_stack) -> None:  # type: ignore[no-untyped-def]
    stack, client = make_stack(database_url=own_postgres.create_database("cohort"))
    job = client.submit(stepping_job(STEPS, 0.05, name="long", **GANG))

    def training() -> int | None:
        """The attempt that trains (past step 50), once one does."""
        now = client.job(job["id"])
        assert now["status"] not in TERMINAL_STATUSES, now["reason"]
        steps = steps_seen(client, job["id"], now["attempt"])
        return now["attempt"] if max(steps or [0]) >= 50 else None

    # Its attempt, not necessarily 1: what is under test is that the attempt running when
    # the database goes away is the one that finishes.
    attempt = wait_for(training, 240, "training (slow to start on a loaded machine)")
    http = httpx.Client(
        base_url=stack.url, timeout=10.0, headers={"Authorization": f"Bearer {stack.token}"}
    )
    spec = stepping_job(5, name="during-outage", replicas=1)
    key = {"Idempotency-Key": "submitted-during-the-outage"}

    bus = redis.Redis.from_url(stack.settings.redis_url, decode_responses=True)
    down_at = time.time()
    own_postgres.stop("fast")  # ends every session, as a restart or failover does
    try:
        # Fresh connections are refused; pooled ones were closed under the api.
        for _ in range(3):
            refused = http.post("/api/v1/jobs", json=spec, headers=key)
            assert refused.status_code == 503, refused.text
            assert int(refused.headers["Retry-After"]) > 0
            assert refused.json()["error"] == "unavailable"
            assert "database" in refused.json()["message"]
            assert http.get(f"/api/v1/jobs/{job['id']}").status_code == 503
            ready = http.get("/readyz")
            assert ready.status_code == 503, ready.text
            assert ready.json()["database"] != "ok"
        # Training and its metrics go on through Redis while SQL is away: the leader reads
        # batches it cannot store, and keeps them pending.
        wait_for(
            lambda: bus.xpending(METRICS_STREAM, GROUP)["pending"] > 0,
            OUTAGE_S,
            "metric batches read but not stored",
        )
        time.sleep(max(0.0, down_at + OUTAGE_S - time.time()))  # the outage itself
    finally:
        own_postgres.start()

    # The first requests after the restart find the pool's dead connections replaced.
    assert http.get("/readyz").status_code == 200
    accepted = http.post("/api/v1/jobs", json=spec, headers=key)
    assert accepted.status_code == 201, accepted.text
    accepted_at = time.time()
    assert (
        http.post("/api/v1/jobs", json=spec, headers=key).json()["id"] == accepted.json()["id"]
    )  # the retry returns the same job

    final = wait_terminal(client, job["id"], timeout=300)
    events = client.events(job["id"])
    assert final["status"] == "succeeded", job_story(client, job["id"])
    assert final["attempt"] == attempt  # the gang never noticed
    transitions = [(e["attempt"], e["to_status"]) for e in events]
    assert len(transitions) == len(set(transitions)), transitions
    # The gang stepped to the end, and every point and log line each replica wrote is
    # stored as written, counted once in its rollup: the batches read from Redis while
    # SQL was down were stored later, once.
    steps = sorted(steps_seen(client, job["id"], attempt))
    assert steps == list(range(1, STEPS + 1))
    assert_nothing_lost(stack, job["id"])
    other = wait_terminal(client, accepted.json()["id"], timeout=180)
    assert other["status"] == "succeeded", other["reason"]
    assert_nothing_lost(stack, other["id"])
    names = [j["name"] for j in client.jobs(limit=500)["items"]]
    assert names.count("during-outage") == 1
    record(
        "PostgreSQL stopped (fast) for 6 s mid-job and started again",
        "api answers 503 with Retry-After and /readyz 503 while it is down; the scheduler "
        "and ingest retry their passes, keeping unstored batches and events unacknowledged; "
        "the running gang is untouched",
        None,
        accepted_at - down_at,
        "nothing: every point and log line of both jobs stored as written, no restart",
    )


# own_postgres first: the stack is stopped before its database server.
def test_an_api_started_while_postgres_is_down_serves_and_registers_its_token_later(
    own_postgres: PostgresServer, make_stack
) -> None:  # type: ignore[no-untyped-def]
    stack, _client = make_stack(database_url=own_postgres.create_database("cohort"))
    new_token = "a-bootstrap-token-set-while-the-database-was-down"
    own_postgres.stop("fast")
    try:
        stack.kill("api")
        # A new bootstrap token: usable only if this api registers it, after the outage.
        api = stack.restart("api", {"COHORT_BOOTSTRAP_TOKEN": new_token})
        http = httpx.Client(
            base_url=stack.url, timeout=10.0, headers={"Authorization": f"Bearer {new_token}"}
        )

        def answering() -> bool:
            assert api.poll() is None, f"the api exited ({api.returncode}) on a database down"
            try:
                return http.get("/healthz").status_code == 200
            except httpx.TransportError:
                return False

        wait_for(answering, 60, "the api to serve with its database down")
        ready = http.get("/readyz")
        assert ready.status_code == 503 and ready.json()["database"] != "ok", ready.text
        refused = http.get("/api/v1/jobs")
        assert refused.status_code == 503, refused.text
        assert int(refused.headers["Retry-After"]) > 0
    finally:
        own_postgres.start()
    listed = wait_for(
        lambda: (r := http.get("/api/v1/jobs")).status_code == 200 and r,
        60,
        "the new token to be registered once the database is back",
    )
    assert listed.json()["items"] == []
    assert api.poll() is None
