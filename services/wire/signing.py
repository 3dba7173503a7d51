"""Who may speak for whom on Redis: HMAC-SHA256 over every message between the control
plane and a node agent (stdlib `hmac`, compared with `compare_digest`).

Anyone who can write to Redis could otherwise start a process on any node (a Celery task
on its queue), stop one, fail a running job with a forged exit, or register a node and
receive gang traffic. So:

* the control plane alone holds COHORT_SIGNING_KEY;
* node N's key is HMAC-SHA256(signing key, "node:" + N), given to N's agent as
  COHORT_NODE_KEY (`cohort node-key N` prints it);
* messages to N (start, stop, cleanup) are sealed with N's key, stamped with the time
  (Redis's clock at both ends: services/wire/clock.py) and N's id, and refused by N's
  agent when unsigned, badly signed, for another node or older
  than MESSAGE_MAX_AGE (the claim and attempt fencing of workers/node/claims.py still
  stop a replay inside that window from starting anything twice);
* N's events and heartbeats are signed with N's key: the scheduler derives it from the
  node id they name, so a compromised node can neither speak as another node nor read or
  answer another node's starts.

Symmetric keys suffice because each pair (control plane, node N) shares its own key: what
N holds lets it sign only as N, and only to or from the control plane. Every signature
covers a purpose (the task's name, "heartbeat", "event"), so a message signed for one use
is worth nothing in another.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, Any, Literal

from pydantic import Field
from pydantic.dataclasses import dataclass as wire_dataclass

from services.wire.contract import STRICT, Contract, Seconds, WireError
from services.wire.replica import (
    CHECKPOINT_TASK,
    CLEANUP_TASK,
    START_TASK,
    STOP_TASK,
    CheckpointReplica,
    CleanupJob,
    Message,
    StartReplica,
    StopReplica,
)

MIN_SIGNING_KEY = 32  # characters of COHORT_SIGNING_KEY (`openssl rand -hex 32` gives 64)
_NODE_KEY = re.compile(r"^[0-9a-f]{64}$")
HEARTBEAT = "heartbeat"
EVENT = "event"
PURPOSES: dict[type, str] = {
    StartReplica: START_TASK,
    StopReplica: STOP_TASK,
    CleanupJob: CLEANUP_TASK,
    CheckpointReplica: CHECKPOINT_TASK,
}

Reason = Literal["unsigned", "bad signature", "another node", "stale", "from the future"]


class Refused(ValueError):
    """A message that does not prove where it came from; `reason` is one of Reason."""

    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


class MissingKey(RuntimeError):
    """A process that must sign or verify has no (usable) key; the message says which."""


def check_signing_key(key: str) -> str:
    """Return the control plane's key if it is long enough to be a secret.

    Raises:
        MissingKey: unset or shorter than MIN_SIGNING_KEY characters.
    """
    if len(key) < MIN_SIGNING_KEY:
        state = "is not set" if not key else f"is {len(key)} characters"
        raise MissingKey(
            f"COHORT_SIGNING_KEY {state}: the scheduler signs what it sends "
            f"to agents with it; set at least {MIN_SIGNING_KEY} random "
            "characters (`openssl rand -hex 32`) on the control plane"
        )
    return key


def check_node_key(key: str, node_id: str) -> str:
    """Return an agent's COHORT_NODE_KEY if it has the form `cohort node-key` prints.

    Raises:
        MissingKey: unset or malformed, saying how to get it.
    """
    if not _NODE_KEY.fullmatch(key):
        state = "is not set" if not key else "is not 64 hexadecimal digits"
        raise MissingKey(
            f"COHORT_NODE_KEY {state}: on the control plane, "
            f"`cohort node-key {node_id}` prints this node's key "
            "(derived from COHORT_SIGNING_KEY; the agent never holds that)"
        )
    return key


def node_key(signing_key: str, node_id: str) -> str:
    """Node `node_id`'s key (64 hex digits), derived from the control plane's key."""
    return hmac.new(
        check_signing_key(signing_key).encode(), f"node:{node_id}".encode(), hashlib.sha256
    ).hexdigest()


def signature(key: str, purpose: str, node_id: str, *parts: str) -> str:
    """HMAC-SHA256 with node key `key` of the purpose, the node and the parts, each
    length-prefixed so no two different lists sign the same bytes."""
    text = "".join(f"{len(part)}:{part}" for part in ("cohort/1", purpose, node_id, *parts))
    return hmac.new(bytes.fromhex(key), text.encode(), hashlib.sha256).hexdigest()


def _matches(expected: str, given: object) -> bool:
    return isinstance(given, str) and hmac.compare_digest(expected, given)


@wire_dataclass(frozen=True, config=STRICT)
class Sealed(Contract):
    """A message and the proof it comes from the control plane (to node `node_id`) or
    from node `node_id` (its heartbeat): what travels as a Celery task's one argument
    and as a node's value in the nodes hash."""

    purpose: str
    node_id: str
    ts: Seconds
    body: str
    sig: Annotated[str, Field(max_length=64)]


def seal(key: str, *, purpose: str, node_id: str, body: str, now: float | None = None) -> str:
    """`body` sealed with node key `key`: the text to send."""
    ts = time.time() if now is None else now
    return Sealed(
        purpose, node_id, ts, body, signature(key, purpose, node_id, repr(ts), body)
    ).encode()


def unseal(
    raw: str | bytes,
    key: str,
    *,
    purpose: str,
    node_id: str,
    max_age: float | None = None,
    now: float | None = None,
) -> Sealed:
    """The sealed message in `raw`, once it proves it is for `purpose` and node `node_id`,
    signed with `key`, and (with `max_age`) no older than `max_age` seconds.

    Raises:
        Refused: saying why (the reason first: unsigned, bad signature, another node,
            stale, from the future).
    """
    try:
        sealed = Sealed.decode(raw)
    except WireError as exc:
        raise Refused("unsigned", f"not a sealed message ({exc})") from None
    if sealed.purpose != purpose:
        raise Refused("bad signature", f"sealed for {sealed.purpose[:64]!r}, not {purpose!r}")
    if sealed.node_id != node_id:
        raise Refused(
            "another node", f"addressed to node {sealed.node_id[:64]!r}, this is {node_id!r}"
        )
    expected = signature(key, purpose, node_id, repr(sealed.ts), sealed.body)
    if not _matches(expected, sealed.sig):
        raise Refused("bad signature", f"not signed with node {node_id!r}'s key")
    if max_age is not None:
        age = (time.time() if now is None else now) - sealed.ts
        if age > max_age:
            raise Refused("stale", f"sent {age:.0f}s ago (more than {max_age:.0f}s)")
        if age < -max_age:
            raise Refused("from the future", f"stamped {-age:.0f}s in the future")
    return sealed


def seal_message(key: str, message: Message, now: float | None = None) -> str:
    """A start, stop or cleanup message sealed for its node: a Celery task's argument."""
    return seal(
        key,
        purpose=PURPOSES[type(message)],
        node_id=message.node_id,
        body=message.encode(),
        now=now,
    )


def sign_event(key: str, node_id: str, kind: str, data: str) -> str:
    """The signature of node `node_id`'s event of `kind` whose JSON is `data`."""
    return signature(key, EVENT, node_id, kind, data)


def verify_event(key: str, node_id: str, fields: dict[str, Any]) -> None:
    """Check an events-stream entry's `sig` against node `node_id`'s key.

    Raises:
        Refused: unsigned or badly signed.
    """
    given = fields.get("sig")
    if not given:
        raise Refused("unsigned", f"an event naming node {node_id[:64]!r} without a signature")
    expected = sign_event(key, node_id, str(fields.get("kind", "")), str(fields.get("data", "")))
    if not _matches(expected, given):
        raise Refused("bad signature", f"an event not signed with node {node_id[:64]!r}'s key")


@dataclass(frozen=True)
class Keyring:
    """The control plane's keys: every node's, derived from the signing key on demand."""

    signing_key: str

    def __post_init__(self) -> None:
        check_signing_key(self.signing_key)

    def node(self, node_id: str) -> str:
        """Node `node_id`'s key."""
        return _derived(self.signing_key, node_id)


@lru_cache(maxsize=4096)
def _derived(signing_key: str, node_id: str) -> str:
    return node_key(signing_key, node_id)
