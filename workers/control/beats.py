"""What agents report through Redis hashes, read for the scheduler's pass: every node's
last heartbeat (checked against its node's key) and every replica's last progress beat,
each timed by when this scheduler saw it arrive (services/cluster/arrivals.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import redis

from services.cluster.arrivals import Arrivals
from services.cluster.nodes import Heartbeat, heartbeat_of
from services.wire.batches import ProgressBeat
from services.wire.contract import WireError
from services.wire.events import NodeHeartbeat
from services.wire.keys import NODES_HASH, OUTPUT_HASH, PROGRESS_HASH
from services.wire.signing import HEARTBEAT, Keyring, Refused, unseal
from workers.control.refusals import Refusals

log = logging.getLogger("cohort.scheduler")

PROGRESS_FORGET = 3600.0  # seconds


def read_heartbeats(
    client: redis.Redis, keyring: Keyring, refusals: Refusals, arrivals: Arrivals[str]
) -> list[Heartbeat]:
    """The last heartbeat of every agent, each signed with its node's key (a node without
    its credential is not registered, nor kept alive), timed by when this scheduler saw
    it arrive: never by the agent's clock (services/cluster/arrivals.py)."""
    raw_beats = {
        str(field): str(value)  # a decoding client (get_redis)
        for field, value in client.hgetall(NODES_HASH).items()
    }
    heard = arrivals.observe(raw_beats)
    beats = []
    for node_id, raw in raw_beats.items():
        try:
            sealed = unseal(raw, keyring.node(node_id), purpose=HEARTBEAT, node_id=node_id)
            beat = NodeHeartbeat.decode(sealed.body)
            if beat.node_id != node_id:
                raise Refused("another node", f"it names node {beat.node_id!r}")
            beats.append(heartbeat_of(beat, heard[node_id]))
        except Refused as exc:
            refusals.heartbeat(node_id, raw, exc.reason, str(exc))
        # WireError is a ValueError, as is a `ts` past the year 9999.
        except (ValueError, OverflowError, OSError) as exc:
            log.warning("ignoring malformed heartbeat %r: %s", raw[:200], exc)
    return beats


def read_progress(
    client: redis.Redis, arrivals: Arrivals[str]
) -> dict[tuple[int, int, int], float]:
    """The time (this scheduler's clock) each replica that sent a progress heartbeat is
    alive through: when its last beat was seen to arrive, plus what it vouched ahead."""

    def ahead(field: str, value: str) -> tuple[Key, float]:
        key, _until, vouched = ProgressBeat.parse(field, value)
        return key, vouched

    return _read_beats(client, PROGRESS_HASH, arrivals, ahead)


def read_output(client: redis.Redis, arrivals: Arrivals[str]) -> dict[tuple[int, int, int], float]:
    """When each replica's output was last seen to grow (this scheduler's clock: the
    arrival of its agent's last output beat, whose value is the output's size so far)."""
    return _read_beats(
        client, OUTPUT_HASH, arrivals, lambda field, _value: (ProgressBeat.key_of(field), 0.0)
    )


Key = tuple[int, int, int]


def _read_beats(
    client: redis.Redis,
    name: str,
    arrivals: Arrivals[str],
    parse: Callable[[str, str], tuple[Key, float]],
) -> dict[Key, float]:
    """Each replica's beat in hash `name`: when it was seen to arrive plus the seconds
    `parse` says it vouches ahead. A running replica beats every second, so a beat
    unchanged for PROGRESS_FORGET belongs to a replica long finished: it is removed (or
    the hash read on every pass would grow with every replica ever run), as is a field
    that is not a beat (WireError)."""
    raw = {str(field): str(value) for field, value in client.hgetall(name).items()}
    heard = arrivals.observe(raw)
    beats, stale = {}, []
    cutoff = arrivals.read_at - PROGRESS_FORGET
    for field, value in raw.items():
        try:
            key, ahead = parse(field, value)
        except WireError:
            stale.append(field)
            continue
        at = heard[field].at
        beats[key] = at + ahead
        if at < cutoff:
            stale.append(field)
    if stale:
        client.hdel(name, *stale)
    return beats
