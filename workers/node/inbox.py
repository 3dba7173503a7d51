"""What this agent accepts off its queue: messages the control plane sealed for this node,
lately (services/wire/signing.py). Anyone who can write to Redis can put a task on the
queue; what fails here is logged with the reason and dropped before anything is claimed,
fetched or started, and no exit is reported (a forged message must not be able to fail a
real job's replica either)."""

from __future__ import annotations

import logging
from typing import TypeVar

from services.wire.contract import WireError
from services.wire.replica import CheckpointReplica, CleanupJob, StartReplica, StopReplica
from services.wire.signing import PURPOSES, Refused, unseal

log = logging.getLogger("cohort.agent")

M = TypeVar("M", StartReplica, StopReplica, CleanupJob, CheckpointReplica)


def open_message(
    raw: str, kind: type[M], *, node_id: str, node_key: str, max_age: float, now: float
) -> M | None:
    """The message of type `kind` in `raw` if it is sealed for this node with its key and
    at most `max_age` seconds old at `now` (Redis's clock, as the control plane stamps
    it: services/wire/clock.py); None (and one log line saying why) otherwise."""
    purpose = PURPOSES[kind]
    name = purpose.rsplit(".", 1)[-1]
    try:
        sealed = unseal(raw, node_key, purpose=purpose, node_id=node_id, max_age=max_age, now=now)
        message = kind.decode(sealed.body)
    except (Refused, WireError) as exc:
        log.error("refused a %s message: %s; nothing done", name, exc)
        return None
    if message.node_id != node_id:  # sealed for us, yet naming another node: not ours
        log.error(
            "refused a %s message: another node: it names node %r; nothing done",
            name,
            message.node_id[:64],
        )
        return None
    return message
