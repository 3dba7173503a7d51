"""Old import path of the Redis names and client, kept for modules outside the wire's
owners (api/): new code imports services.wire.keys and services.wire.client."""

from services.wire.client import get_redis, publish_event, wake_scheduler
from services.wire.keys import (
    EVENTS_STREAM,
    METRICS_STREAM,
    NODES_HASH,
    PROGRESS_HASH,
    SCHEDULER_LOCK,
    STREAM_MAXLEN,
    attempt_key,
    claim_key,
    node_queue,
)

__all__ = ["EVENTS_STREAM", "METRICS_STREAM", "NODES_HASH", "PROGRESS_HASH", "SCHEDULER_LOCK",
           "STREAM_MAXLEN", "attempt_key", "claim_key", "get_redis", "node_queue",
           "publish_event", "wake_scheduler"]
