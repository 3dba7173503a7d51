"""Redis key names and the connection: the only channel between agents and the control plane.

Agents and replicas hold no SQL credentials. They talk to the control plane through
these keys alone: Celery queues `node.<id>` in, and out the streams below.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from services.settings import get_settings

METRICS_STREAM = "cohort:metrics"  # replicas -> ingester: metric batches
EVENTS_STREAM = "cohort:events"  # agents, api -> scheduler: replica started / exited, wake
NODES_HASH = "cohort:nodes"  # agents -> scheduler: heartbeat per node id
SCHEDULER_LOCK = "cohort:scheduler:lock"  # one active scheduler at a time
PROGRESS_HASH = "cohort:progress"  # replicas -> scheduler: "job:attempt:index" -> unix time

STREAM_MAXLEN = 1_000_000


def attempt_key(job_id: int) -> str:
    """Holds a job's current attempt, so an agent can refuse a stale start message."""
    return f"cohort:attempt:{int(job_id)}"


def claim_key(job_id: int, attempt: int, index: int) -> str:
    """Claimed (SET NX) by the one agent that starts this replica: never two processes."""
    return f"cohort:claim:{int(job_id)}:{int(attempt)}:{int(index)}"


def progress_field(job_id: int, attempt: int, index: int) -> str:
    return f"{int(job_id)}:{int(attempt)}:{int(index)}"


def node_queue(node_id: str) -> str:
    """The Celery queue that only node `node_id`'s agent consumes."""
    return f"node.{node_id}"


@lru_cache(maxsize=4)
def get_redis(url: str | None = None) -> redis.Redis:
    """A client for the configured Redis (decoded strings)."""
    # Bounded retries: a caller (the agent's lease, the scheduler's lock) must learn
    # within seconds that Redis is gone, not after redis-py's default retry budget.
    return redis.Redis.from_url(url or get_settings().redis_url, decode_responses=True,
                                health_check_interval=30, socket_timeout=10,
                                socket_connect_timeout=2,
                                retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 2))


def publish_event(client: redis.Redis, kind: str, **fields: Any) -> None:
    """Append one agent event to the events stream."""
    client.xadd(EVENTS_STREAM, {"kind": kind, "data": json.dumps(fields)},
                maxlen=STREAM_MAXLEN, approximate=True)


def wake_scheduler(client: redis.Redis) -> None:
    """Ask the scheduler for a pass now rather than at its next tick (best effort)."""
    # The scheduler blocks reading the events stream, so an event wakes it at once.
    try:
        publish_event(client, "wake")
    except redis.RedisError:
        pass  # the scheduler's timer will get there; SQL already holds the change
