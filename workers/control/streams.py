"""Reading a Redis stream through the leader's consumer group, as the events loop and the
ingest both do: the leader's own unacknowledged entries first (a crash mid-batch, or a
leader that lost its lock), then new ones; each entry acknowledged once it is handled."""

from __future__ import annotations

from collections.abc import Iterator
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


class GroupReader:
    """One stream read by the leader's consumer: `count` entries a read.

    Every read asks for the consumer's unacknowledged entries first: not only this
    reader's own failures leave some. Every leader reads as the one consumer, and a
    deposed leader frozen inside a blocking read still has entries delivered to it, which
    it never stores: the next leader finds them there (a reader that skipped the pending
    read after a clean one left them unstored, and the exits that wait for them waited
    past the lock's lease). The group is made on a reader's first read and again when a
    read says `NOGROUP` (Redis lost it), not before every read: the ingest reads several
    times a second while replicas ship points.
    """

    def __init__(self, client: redis.Redis, stream: str, count: int) -> None:
        self.client = client
        self.stream = stream
        self.count = count
        self._made = False  # the group made (or found) by this reader

    def batches(self, block_ms: int) -> Iterator[list[Entry]]:
        """Unacknowledged entries, then new ones (waiting up to `block_ms` for them)."""
        if not self._made:
            ensure_group(self.client, self.stream)
            self._made = True
        for start in ("0", ">"):
            for _stream, entries in self._read(start, block_ms):
                if entries:
                    yield entries

    def _read(self, start: str, block_ms: int) -> list[tuple[str, list[Entry]]]:
        try:
            reply = self._xreadgroup(start, block_ms)
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            # Redis lost the group (a flush, a restart without persistence): make it again
            # (from the stream's start) and read once more.
            ensure_group(self.client, self.stream)
            reply = self._xreadgroup(start, block_ms)
        # redis-py types every protocol's reply shape; ours is RESP2 with decoded strings
        # (services.wire.client.get_redis): [[stream, [(id, fields), ...]]].
        return cast(list[tuple[str, list[Entry]]], reply or [])

    def _xreadgroup(self, start: str, block_ms: int) -> object:
        return self.client.xreadgroup(
            GROUP,
            CONSUMER,
            {self.stream: start},
            count=self.count,
            block=None if start == "0" else block_ms,
        )

    def ack(self, *entry_ids: str) -> None:
        """Mark entries handled: no leader reads them again."""
        self.client.xack(self.stream, GROUP, *entry_ids)
