"""The Redis client factory, and the two writes every zone makes to the events stream."""

from __future__ import annotations

from functools import lru_cache

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from services.settings import get_settings
from services.wire.events import Event, Wake
from services.wire.keys import EVENTS_STREAM, STREAM_MAXLEN


def connect(url: str, *, retries: int = 2, socket_timeout: float = 10.0,
            decode_responses: bool = True, health_check_interval: int = 30) -> redis.Redis:
    """A Redis client (lazy: it connects on first use) that gives up within seconds.

    Bounded retries: a caller (the agent's lease, the scheduler's lock) must learn
    quickly that Redis is gone, not after redis-py's default retry budget; a replica's
    metric reporter passes `retries=0`, since its own loop retries between steps.
    """
    return redis.Redis.from_url(url, decode_responses=decode_responses,
                                health_check_interval=health_check_interval,
                                socket_timeout=socket_timeout, socket_connect_timeout=2,
                                retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), retries))


@lru_cache(maxsize=4)
def get_redis(url: str | None = None) -> redis.Redis:
    """This process's client for the configured Redis (decoded strings)."""
    return connect(url or get_settings().redis_url)


def publish_event(client: redis.Redis, event: Event) -> None:
    """Append one event to the events stream."""
    client.xadd(EVENTS_STREAM, event.entry(), maxlen=STREAM_MAXLEN, approximate=True)


def wake_scheduler(client: redis.Redis) -> None:
    """Ask the scheduler for a pass now rather than at its next tick (best effort)."""
    # The scheduler blocks reading the events stream, so an event wakes it at once.
    try:
        publish_event(client, Wake())
    except redis.RedisError:
        pass  # the scheduler's timer will get there; SQL already holds the change
