"""Reading a Redis stream through the leader's consumer group, as the events loop and the
ingest both do: the leader's own unacknowledged entries first (a crash mid-batch, or a
leader that lost its lock), then new ones; each entry acknowledged once it is handled."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

import redis
from redis.exceptions import ResponseError

from services.wire.keys import LEADER_GROUP

GROUP = LEADER_GROUP
CONSUMER = "leader"  # fixed: a new leader re-reads what the last one left unacknowledged

Entry = tuple[str, dict[str, str]]  # (entry id, fields)


def ensure_group(client: redis.Redis, stream: str, group: str = GROUP) -> None:
    """Create a consumer group (and the stream) if missing (again after a Redis flush)."""
    try:
        client.xgroup_create(stream, group, id="0", mkstream=True)
    except ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


@dataclass(frozen=True)
class GroupReader:
    """One stream read by the leader's consumer: `count` entries a read."""

    client: redis.Redis
    stream: str
    count: int

    def batches(self, block_ms: int) -> Iterator[list[Entry]]:
        """Unacknowledged entries, then new ones (waiting up to `block_ms` for them)."""
        ensure_group(self.client, self.stream)
        for start in ("0", ">"):
            reply = self.client.xreadgroup(
                GROUP,
                CONSUMER,
                {self.stream: start},
                count=self.count,
                block=None if start == "0" else block_ms,
            )
            # redis-py types every protocol's reply shape; ours is RESP2 with decoded
            # strings (services.wire.client.get_redis): [[stream, [(id, fields), ...]]].
            for _stream, entries in cast(list[tuple[str, list[Entry]]], reply or []):
                if entries:
                    yield entries

    def ack(self, *entry_ids: str) -> None:
        """Mark entries handled: no leader reads them again."""
        self.client.xack(self.stream, GROUP, *entry_ids)
