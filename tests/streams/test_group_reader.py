"""The leader's consumer-group reader (workers/control/streams.py) on a real Redis: what a
crashed leader left unacknowledged is read again, first; what was acknowledged never is."""

from __future__ import annotations

import redis

from workers.control.streams import GroupReader

STREAM = "cohort:test-group-reader"


def _read(reader: GroupReader) -> list[list[str]]:
    return [[fields["n"] for _id, fields in entries] for entries in reader.batches(block_ms=10)]


def test_unacknowledged_entries_come_back_first_and_acknowledged_ones_never(
    bus: redis.Redis,
) -> None:
    reader = GroupReader(bus, STREAM, count=2)
    for n in range(3):
        bus.xadd(STREAM, {"n": str(n)})
    assert _read(reader) == [["0", "1"]]  # one read of `count` new entries

    # A leader that read "0" and "1" and died before acknowledging them: they come back,
    # ahead of the entry nobody has read yet.
    assert _read(reader) == [["0", "1"], ["2"]]

    pending = [entry_id for entry_id, _ in bus.xrange(STREAM)]
    reader.ack(*pending[:2])
    assert _read(reader) == [["2"]]
    reader.ack(pending[2])
    assert _read(reader) == []


def test_the_group_is_made_again_after_redis_loses_it(bus: redis.Redis) -> None:
    reader = GroupReader(bus, STREAM, count=10)
    assert _read(reader) == []  # makes the stream and the group
    bus.flushdb()
    bus.xadd(STREAM, {"n": "after"})
    assert _read(reader) == [["after"]]
