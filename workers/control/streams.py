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

    A reader asks for the leader's unacknowledged entries (and makes the group, if
    missing) on its first read and on the read after one its caller did not finish (an
    exception between a batch and its acknowledgement); once every batch of a read was
    handled, the next read asks only for new entries. Each round trip saved counts: the
    ingest reads several times a second while replicas ship points. A new term reads with
    a new reader, so it starts with what an earlier leader left pending.
    """

    def __init__(self, client: redis.Redis, stream: str, count: int) -> None:
        self.client = client
        self.stream = stream
        self.count = count
        self._clean = False  # the last read's batches were all handled

    def batches(self, block_ms: int) -> Iterator[list[Entry]]:
        """Unacknowledged entries (unless the last read ended cleanly), then new ones
        (waiting up to `block_ms` for them)."""
        if self._clean:
            starts: tuple[str, ...] = (">",)
        else:
            ensure_group(self.client, self.stream)
            starts = ("0", ">")
        # Clean again only once the caller has handled every batch this read yields.
        self._clean = False
        for start in starts:
            for _stream, entries in self._read(start, block_ms):
                if entries:
                    yield entries
        self._clean = True

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
