"""The `cohort:metrics` sender: `MetricReporter` ships one replica's metric points to
Redis in batches, and sends its progress heartbeat.

The node agent's: it ships the points it reads from each replica's metrics file and
TensorBoard event files (workers/node/scalars.py). Replicas hold no Redis credentials;
they write that file (workers/replica/report_channel.py). The buffering is shared
(workers/reporting.py); this module adds Redis: retries, and replay after a restart.

Every stream entry has one field `data`, a `MetricBatch` (services/wire/batches.py).
"""

from __future__ import annotations

import time
from typing import Any

import redis

from services.wire import client as wire_client
from services.wire.batches import MetricBatch, Point, ProgressBeat
from services.wire.keys import METRICS_STREAM, PROGRESS_HASH, STREAM_MAXLEN
from workers.replay import RecentlySent
from workers.reporting import (
    BEAT_INTERVAL,
    ENTRY_POINTS,
    FLUSH_INTERVAL,
    FLUSH_POINTS,
    MAX_BUFFER,
    PointBuffer,
    warn,
)

__all__ = [
    "BEAT_INTERVAL",
    "ENTRY_POINTS",
    "FLUSH_INTERVAL",
    "FLUSH_POINTS",
    "MAX_BUFFER",
    "MetricReporter",
    "connect",
    "warn",
]

SEND_ATTEMPTS = 3
RETRY_BACKOFF = 0.05  # seconds; doubled after each failed attempt


def connect(redis_url: str) -> redis.Redis:
    """A Redis client for the metrics stream (lazy: nothing is sent until a flush)."""
    # No retries in redis-py: our own loop is shorter, so a dead Redis costs the
    # sender only a few milliseconds per flush.
    return wire_client.connect(
        redis_url, retries=0, socket_timeout=5.0, decode_responses=False, health_check_interval=0
    )


class MetricReporter(PointBuffer):
    """Buffers one replica's metric points and appends them to the metrics stream in batches."""

    where = "Redis"

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._client = client
        self._recent: RecentlySent[list[Point]] = RecentlySent()  # for a Redis restart

    @classmethod
    def from_url(cls, redis_url: str, **kwargs: Any) -> MetricReporter:
        """A reporter writing to the Redis at `redis_url`."""
        return cls(connect(redis_url), **kwargs)

    def _send_beat(self, alive_until: float) -> None:
        field, value = ProgressBeat(
            self._job_id,
            self._attempt,
            self._replica,
            alive_until,
            ahead=max(0.0, alive_until - time.time()),
        ).encode()
        self._client.hset(PROGRESS_HASH, field, value)

    def close(self) -> None:
        """Release the Redis connection."""
        close = getattr(self._client, "close", None)
        if close is not None:
            try:
                close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass

    def _sent(self, points: list[Point]) -> None:
        """Keep what was sent lately: if Redis restarts and loses it before the
        control plane stored it, it is sent again (stored once: the key is unique)."""
        self._recent.add(points)
        self._replay_lost()

    def _replay_lost(self) -> None:
        """Send again what a wipe of Redis erased, if Redis lost its data since the last
        look (the lock held). What cannot be sent now goes back to the buffer."""
        lost = self._recent.lost_to_restart(self._client)
        if lost:
            warn("Redis restarted: sending the last points again")
            for old in lost:
                if self._send(old) is not None:
                    self._buffer[:0] = old
                else:
                    self._recent.add(old)  # erased again, it is sent again

    def send_again(self) -> None:
        """After the replica ended (workers/replay.py AfterEnd): send what is still
        buffered, and again what a wipe erased since the last send."""
        if not self._lock.acquire(timeout=1.0):
            return  # the last flush is still under way: the next tick
        try:
            self._drain()
            if self._buffer:
                self._send_buffer()  # replays what a wipe erased on the way
            else:
                self._replay_lost()
        finally:
            self._lock.release()

    def _send(self, points: list[Point]) -> Exception | None:
        payload = MetricBatch(self._job_id, self._attempt, self._replica, points).encode()
        error: Exception | None = None
        for attempt in range(SEND_ATTEMPTS):
            if attempt:
                time.sleep(RETRY_BACKOFF * 2 ** (attempt - 1))
            try:
                self._client.xadd(
                    METRICS_STREAM, {"data": payload}, maxlen=STREAM_MAXLEN, approximate=True
                )
                return None
            except redis.RedisError as exc:
                error = exc
        return error
