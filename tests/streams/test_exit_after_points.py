"""A replica's last points reach SQL before its exit is applied.

The agent ships a replica's last points, then reports its exit. Applying the exit may
start the job's next attempt at once (a failed gang restarted, a drained one moved), and
from then on the ingest refuses the old attempt's points. So the leader holds an exit
until the ingest has stored what the metrics stream held when the exit was read: the
point of the step a replica saved before exiting is never lost to the race (a drained
gang's history had a missing step when the ingest's commit came second)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import sqlalchemy as sa

from services.wire.keys import METRICS_STREAM
from tests.streams.conftest import SIGNING_KEY, Kept, ingest_until, ship_points
from workers.control.streams import ensure_group


@pytest.fixture
def node(pg_url: str) -> Iterator[str]:  # noqa: ARG001 - pg_url: the test database
    """A node of this test's own, removed with its replicas afterwards (committed rows)."""
    from services.cluster.nodes import Heartbeat, record_heartbeat
    from services.db import session_scope
    from services.models import Node, Replica, utcnow

    node_id = f"node-{uuid.uuid4().hex[:8]}"
    with session_scope() as session:
        record_heartbeat(session=session, beat=Heartbeat(node_id, "10.1.0.1", 1, 0, utcnow()))
    yield node_id
    with session_scope() as session:
        session.execute(sa.delete(Replica).where(Replica.node_id == node_id))
        session.execute(sa.delete(Node).where(Node.id == node_id))


def running_replica(job_id: int, node_id: str) -> None:
    """Replica 0 of attempt 1 running on `node_id`, as a placing pass and its start
    leave it."""
    from services.db import session_scope
    from services.jobs.transitions import transition_job
    from services.models import Replica, utcnow
    from services.statuses import JobStatus
    from tests.factories import replica_rows

    with session_scope() as session:
        for target in (JobStatus.SCHEDULED, JobStatus.RUNNING):
            transition_job(session=session, job_id=job_id, target=target, reason="test")
        row = {**replica_rows(job_id, 1, utcnow())[0], "node_id": node_id, "status": "running"}
        row["started_at"] = utcnow()
        session.execute(sa.insert(Replica), [row])


def ship_last_points_then_exit(bus: redis.Redis, job_id: int, node_id: str) -> None:
    """What the agent does when a replica exits 1: its last points, then its exit."""
    from services.wire.client import publish_node_event
    from services.wire.events import ReplicaExited
    from services.wire.signing import node_key

    ship_points(bus, job_id, [[step, 0, "loss", 1.0 / step, 1.0] for step in (1, 2, 3)])
    publish_node_event(
        bus,
        ReplicaExited(node_id=node_id, job_id=job_id, attempt=1, index=0, exit_code=1, ts=0.0),
        node_key(SIGNING_KEY, node_id),
    )


def beat_listing_the_exit(bus: redis.Redis, job_id: int, node_id: str) -> None:
    """The agent's heartbeat once the replica's process is gone: its exit code, listed
    from before the exit's event is published (the agent reaps the job's leftovers in
    between) until long after."""
    from services.wire.events import NodeHeartbeat
    from services.wire.keys import NODES_HASH
    from services.wire.signing import HEARTBEAT, node_key, seal

    now = time.time()
    body = NodeHeartbeat(node_id, "10.1.0.1", 1, now, exited=((job_id, 1, 0, 1),)).encode()
    key = node_key(SIGNING_KEY, node_id)
    bus.hset(NODES_HASH, node_id, seal(key, purpose=HEARTBEAT, node_id=node_id, body=body))


def stored_steps(job_id: int) -> list[int]:
    from services.db import session_scope
    from services.models import MetricPoint

    with session_scope() as session:
        query = sa.select(MetricPoint.step).where(MetricPoint.job_id == job_id)
        return sorted(session.execute(query).scalars())


def job_attempt(job_id: int) -> int:
    from services.db import session_scope
    from services.models import Job

    with session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        return job.attempt


def settled_attempt(job_id: int) -> int:
    """The job's attempt once settled as the next pass settles it: a gang torn down by
    the exit is queued again as a new attempt."""
    from services.cluster import gangs
    from services.db import session_scope
    from services.models import Job

    with session_scope() as session:
        job = session.get(Job, job_id)
        assert job is not None
        gangs.settle_job(session=session, job=job)
    return job_attempt(job_id)


def leader(bus: redis.Redis) -> Any:
    from services.cluster.fencing import begin_term
    from services.settings import get_settings
    from services.wire.signing import Keyring
    from workers.control.scheduler import Scheduler

    return Scheduler(get_settings(), bus, Kept(), Keyring(SIGNING_KEY)), begin_term(lease=10)


def test_an_exit_that_restarts_the_gang_waits_for_the_points_shipped_before_it(
    bus: redis.Redis, committed: Any, node: str
) -> None:
    _, job_id = committed(replicas=1, restart_policy="on_failure", max_restarts=1)
    running_replica(job_id, node)
    ensure_group(bus, METRICS_STREAM)  # the ingest's consumer group, as a running leader has
    ship_last_points_then_exit(bus, job_id, node)
    scheduler, fence = leader(bus)
    # Longer than any stall of a loaded machine between the thread's start and the look
    # below: the exit is still held because the points are unstored, not by chance.
    scheduler.points_before_exit = 60.0
    applied: list[int] = []
    events = threading.Thread(
        target=lambda: applied.append(scheduler.handle_events(block_ms=100, fence=fence))
    )
    events.start()
    time.sleep(0.5)  # the ingest is slow: the exit waits for it
    assert events.is_alive() and job_attempt(job_id) == 1
    assert ingest_until(bus, 3) == 3
    events.join(10)
    assert applied == [1]
    # The exit restarted the gang; the points its replica shipped first are attempt 1's.
    assert settled_attempt(job_id) == 2
    assert stored_steps(job_id) == [1, 2, 3]


def test_without_an_ingest_an_exit_is_applied_after_the_wait(
    bus: redis.Redis, committed: Any, node: str, caplog: Any
) -> None:
    """A leader whose ingest is far behind still applies exits: late, and said."""
    _, job_id = committed(replicas=1, restart_policy="on_failure", max_restarts=1)
    running_replica(job_id, node)
    ensure_group(bus, METRICS_STREAM)
    ship_last_points_then_exit(bus, job_id, node)
    scheduler, fence = leader(bus)
    scheduler.points_before_exit = 0.3
    started = time.monotonic()
    assert scheduler.handle_events(block_ms=100, fence=fence) == 1
    assert time.monotonic() - started >= 0.3
    assert settled_attempt(job_id) == 2
    assert "metrics ingest over" in caplog.text
    # What came after the next attempt started is an old attempt's, refused.
    assert ingest_until(bus, 1, timeout=1) == 0
    assert stored_steps(job_id) == []


def test_an_exit_a_heartbeat_lists_first_waits_for_the_points_shipped_before_it(
    bus: redis.Redis, committed: Any, node: str
) -> None:
    """The pass records an exit its agent's beat lists: it too waits for the replica's
    last points (the drained gang's saved step was refused when the beat came first)."""
    _, job_id = committed(replicas=1, restart_policy="on_failure", max_restarts=1)
    running_replica(job_id, node)
    ensure_group(bus, METRICS_STREAM)
    ship_points(bus, job_id, [[step, 0, "loss", 1.0 / step, 1.0] for step in (1, 2, 3)])
    beat_listing_the_exit(bus, job_id, node)  # its event is not published yet
    scheduler, fence = leader(bus)
    scheduler.points_before_exit = 60.0  # as above: held by the unstored points alone
    passes = threading.Thread(target=scheduler.run_pass, args=(fence,))
    passes.start()
    time.sleep(0.5)
    assert passes.is_alive() and job_attempt(job_id) == 1
    assert ingest_until(bus, 3) == 3
    passes.join(30)
    assert not passes.is_alive()
    assert settled_attempt(job_id) == 2
    assert stored_steps(job_id) == [1, 2, 3]
    # The next pass lists the same exit: nothing new to wait for.
    started = time.monotonic()
    ship_points(bus, job_id, [[4, 0, "loss", 0.25, 1.0]])  # unstored, and no wait for it
    scheduler.run_pass(fence)
    assert time.monotonic() - started < 30
