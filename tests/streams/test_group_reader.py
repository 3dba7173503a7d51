"""The leader's consumer-group reader (workers/control/streams.py) on a real Redis: what a
crashed or deposed leader left unacknowledged is read again, first; what was acknowledged
never is; a reader makes its group once."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from workers.control.streams import CONSUMER, GROUP, GroupReader

STREAM = "cohort:test-group-reader"


class Counting(redis.Redis):
    """The same Redis, each command's name recorded as it is sent."""

    sent: list[str]

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.sent.append(str(args[0]))
        return super().execute_command(*args, **options)


def counting(bus: redis.Redis) -> Counting:
    client = Counting(connection_pool=bus.connection_pool)
    client.sent = []
    return client


def _read(reader: GroupReader, *, ack: bool = False) -> list[list[str]]:
    read = []
    for entries in reader.batches(block_ms=10):
        read.append([fields["n"] for _id, fields in entries])
        if ack:
            reader.ack(*[entry_id for entry_id, _ in entries])
    return read


def test_unacknowledged_entries_come_back_first_and_acknowledged_ones_never(
    bus: redis.Redis,
) -> None:
    reader = GroupReader(bus, STREAM, count=2)
    for n in range(3):
        bus.xadd(STREAM, {"n": str(n)})
    assert _read(reader) == [["0", "1"]]  # one read of `count` new entries

    # A leader that read "0" and "1" and died before acknowledging them: the next
    # leader's reader reads them again, ahead of the entry nobody has read yet.
    reader = GroupReader(bus, STREAM, count=2)
    assert _read(reader) == [["0", "1"], ["2"]]

    pending = [entry_id for entry_id, _ in bus.xrange(STREAM)]
    reader = GroupReader(bus, STREAM, count=2)
    reader.ack(*pending[:2])
    assert _read(reader) == [["2"]]
    reader.ack(pending[2])
    assert _read(GroupReader(bus, STREAM, count=2)) == []


def test_a_read_its_caller_did_not_finish_is_read_again_by_the_same_reader(
    bus: redis.Redis,
) -> None:
    reader = GroupReader(bus, STREAM, count=10)
    assert _read(reader) == []
    bus.xadd(STREAM, {"n": "a"})
    with pytest.raises(RuntimeError):
        for _entries in reader.batches(block_ms=10):
            raise RuntimeError("the SQL commit failed before the acknowledgement")
    bus.xadd(STREAM, {"n": "b"})
    assert _read(reader, ack=True) == [["a"], ["b"]]  # the pending one first
    assert _read(reader, ack=True) == []


def test_a_reader_makes_its_group_once_and_asks_for_pending_entries_every_read(
    bus: redis.Redis,
) -> None:
    client = counting(bus)
    reader = GroupReader(client, STREAM, count=10)
    assert _read(reader, ack=True) == []  # the first read: the group made, pending asked
    assert client.sent == ["XGROUP CREATE", "XREADGROUP", "XREADGROUP"]

    client.sent.clear()
    bus.xadd(STREAM, {"n": "x"})
    assert _read(reader, ack=True) == [["x"]]
    assert _read(reader, ack=True) == []
    assert client.sent == ["XREADGROUP", "XREADGROUP", "XACK", "XREADGROUP", "XREADGROUP"]


def test_entries_delivered_to_a_deposed_leader_are_read_by_the_next(bus: redis.Redis) -> None:
    """Every leader reads as the one consumer. A leader frozen inside its blocking read is
    still delivered what arrives (Redis answers the read; nobody stores it): the leader
    that took over, whose own reads all ended cleanly, reads those entries next."""
    reader = GroupReader(bus, STREAM, count=10)
    assert _read(reader, ack=True) == []
    bus.xadd(STREAM, {"n": "taken"})
    # The deposed leader's read, answered while its process is stopped: never acknowledged.
    deposed = bus.xreadgroup(GROUP, CONSUMER, {STREAM: ">"}, count=10)
    assert [fields["n"] for _, entries in deposed for _id, fields in entries] == ["taken"]
    bus.xadd(STREAM, {"n": "new"})
    assert _read(reader, ack=True) == [["taken"], ["new"]]
    assert _read(reader, ack=True) == []


def test_the_group_is_made_again_after_redis_loses_it(bus: redis.Redis) -> None:
    reader = GroupReader(bus, STREAM, count=10)
    assert _read(reader) == []  # makes the stream and the group
    bus.flushdb()
    bus.xadd(STREAM, {"n": "after"})
    assert _read(reader, ack=True) == [["after"]]  # a clean reader, its group gone
    assert _read(reader) == []
