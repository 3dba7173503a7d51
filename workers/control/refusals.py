"""What the scheduler ignores because it cannot trust where it came from: unsigned or
badly signed events and heartbeats, and reports about a replica from a node that does
not run it (services/wire/signing.py). Each is logged, at most once a minute per source
and reason (a forged heartbeat stays in the nodes hash and is read on every pass), and
counted in the stats hash, which the api's /metrics shows as
`cohort_refused_messages_total{reason=...}`."""

from __future__ import annotations

import logging
import time

import redis

from services.wire.keys import STATS_HASH

log = logging.getLogger("cohort.scheduler")

LOG_EVERY = 60.0  # seconds between two log lines of one source and reason
COUNTER_PREFIX = "refused:"  # the stats hash's fields: refused:<reason>


class Refusals:
    """The scheduler's log and counters of refused messages."""

    def __init__(self, client: redis.Redis) -> None:
        self.redis = client
        self.logged: dict[tuple[str, str], float] = {}
        self.last_heartbeat: dict[str, str] = {}  # node id -> the refused value last counted

    def note(self, reason: str, source: str, detail: str) -> None:
        """Log (at most once a minute per `source` and `reason`) and count one refused
        message; `source` names a kind of message, `detail` this one."""
        now = time.monotonic()
        if now - self.logged.get((source, reason), -LOG_EVERY) >= LOG_EVERY:
            self.logged[source, reason] = now
            log.warning("ignoring %s: %s", source, detail)
        try:
            self.redis.hincrby(STATS_HASH, f"{COUNTER_PREFIX}{reason}", 1)
        except redis.RedisError:
            pass  # the count is for people; the refusal itself stands

    def heartbeat(self, node_id: str, raw: str, reason: str, detail: str) -> None:
        """A refused heartbeat, counted once per value (it is read again every pass)."""
        if self.last_heartbeat.get(node_id) == raw:
            return
        if len(self.last_heartbeat) > 10_000:  # fields made up by the thousand: start over
            self.last_heartbeat.clear()
        self.last_heartbeat[node_id] = raw
        self.note(reason, f"the heartbeat of node {node_id[:64]!r}", detail)
