"""What the leader reads from Redis while the database does not answer: nothing is
acknowledged before it is stored, so nothing read during an outage is lost, and nothing
is stored twice after it."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
import sqlalchemy as sa

from services.wire.keys import EVENTS_STREAM, METRICS_STREAM
from tests.conftest import database_refused
from tests.streams.conftest import SIGNING_KEY, Kept, ingest_until, ship_points
from workers.control.streams import GROUP


def pending(bus: redis.Redis, stream: str) -> int:
    return int(bus.xpending(stream, GROUP)["pending"])


def test_metric_batches_read_while_the_database_is_down_are_stored_later_once(
    bus: redis.Redis, committed: Any
) -> None:
    from services.db import session_scope
    from services.models import MetricPoint
    from workers.control.ingest import METRICS, ingest_once

    _, job_id = committed()
    for step in (1, 2, 3):
        ship_points(bus, job_id, [[step, 0, "loss", 1.0 / step, 1.0]])
    with database_refused():
        for _ in range(2):  # the ingest retries while the database is down
            with pytest.raises(sa.exc.OperationalError):
                ingest_once(bus, METRICS, sessions=session_scope, block_ms=100)
            assert pending(bus, METRICS_STREAM) == 3  # read, kept unacknowledged
    assert ingest_until(bus, 3) == 3
    assert ingest_until(bus, 1, timeout=1) == 0
    assert pending(bus, METRICS_STREAM) == 0
    with session_scope() as session:
        steps = (
            session.execute(
                sa.select(MetricPoint.step)
                .where(MetricPoint.job_id == job_id)
                .order_by(MetricPoint.step)
            )
            .scalars()
            .all()
        )
    assert steps == [1, 2, 3]


def test_events_read_while_the_database_is_down_are_applied_later(
    bus: redis.Redis, committed: Any
) -> None:
    from services.cluster.fencing import begin_term
    from services.settings import get_settings
    from services.wire.client import publish_node_event
    from services.wire.events import ReplicaExited
    from services.wire.signing import Keyring, node_key
    from workers.control.scheduler import Scheduler

    _, job_id = committed()
    keyring = Keyring(SIGNING_KEY)
    scheduler = Scheduler(get_settings(), bus, Kept(), keyring)
    fence = begin_term(lease=10)  # this scheduler leads (taken while SQL answers)
    for index in (0, 1):
        publish_node_event(
            bus,
            ReplicaExited(
                node_id="node-a", job_id=job_id, attempt=1, index=index, exit_code=0, ts=time.time()
            ),
            node_key(SIGNING_KEY, "node-a"),
        )
    with database_refused():
        with pytest.raises(sa.exc.OperationalError):
            scheduler.handle_events(block_ms=100, fence=fence)
        assert pending(bus, EVENTS_STREAM) == 2  # neither acknowledged: both read again
    # Applied (here: nothing to record, the queued job has no replicas yet), acknowledged.
    assert scheduler.handle_events(block_ms=100, fence=fence) == 2
    assert pending(bus, EVENTS_STREAM) == 0
