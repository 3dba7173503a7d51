"""Agents -> scheduler: replica started / exited events, wake-ups, and node heartbeats.

Events travel on the events stream as entries `{"kind": KIND, "data": <JSON>}`
(`entry()` makes one, `decode_event` reads one back), plus `sig` for a node's events
(services/wire/signing.py); a node's heartbeat is the sealed value of its field in the
nodes hash.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, Field
from pydantic.dataclasses import dataclass
from redis.typing import EncodableT, FieldT

from services.wire.contract import STRICT, Attempt, Contract, Id, Seconds, WireError


def _clipped(limit: int) -> AfterValidator:
    # The scheduler keeps at most this much of what an agent says about itself: a
    # misbehaving agent cannot grow the pass's memory (nor the nodes table's rows).
    return AfterValidator(lambda value: value[:limit])


class Event(Contract):
    """An entry of the events stream."""

    __slots__ = ()
    KIND: ClassVar[str]

    def entry(self) -> dict[FieldT, EncodableT]:
        """The stream entry's fields."""
        return {"kind": self.KIND, "data": self.encode()}


@dataclass(frozen=True, config=STRICT)
class Wake(Event):
    """Something changed in SQL (a submission, a cancel): run a pass now."""

    KIND: ClassVar[str] = "wake"


@dataclass(frozen=True, config=STRICT)
class ReplicaStarted(Event):
    """An agent started the process of replica (job, attempt, index)."""

    KIND: ClassVar[str] = "replica_started"
    node_id: str
    job_id: Id
    attempt: Attempt
    index: Id
    pid: Annotated[int, Field(ge=1)]
    ts: Seconds


@dataclass(frozen=True, config=STRICT)
class ReplicaExited(Event):
    """A replica's process exited, or was never started (`never_started`, with the
    reason in `log_tail`): the exit code says what it means for a restart
    (services/exit_codes.py)."""

    KIND: ClassVar[str] = "replica_exited"
    node_id: str
    job_id: Id
    attempt: Attempt
    index: Id
    exit_code: Id
    ts: Seconds
    log_tail: str = ""
    never_started: bool = False


@dataclass(frozen=True, config=STRICT)
class ReplicaRestarted(Event):
    """An agent started a replica's process again in place, under the same (job, attempt,
    index), after it exited with `exit_code`: a parameter_server worker, which the
    training tolerates losing (workers/node/respawn.py). `restarts` counts them."""

    KIND: ClassVar[str] = "replica_restarted"
    node_id: str
    job_id: Id
    attempt: Attempt
    index: Id
    pid: Annotated[int, Field(ge=1)]
    exit_code: Id
    restarts: Annotated[int, Field(ge=1)]
    ts: Seconds


@dataclass(frozen=True, config=STRICT)
class ReplicaPreparing(Event):
    """An agent is working on a placed replica's start, and says what: `note`, as
    "installing 3 packages: ..." (workers/node/envs.py). The replica stays pending."""

    KIND: ClassVar[str] = "replica_preparing"
    node_id: str
    job_id: Id
    attempt: Attempt
    index: Id
    note: Annotated[str, _clipped(300)]
    ts: Seconds


@dataclass(frozen=True, config=STRICT)
class NodeDraining(Event):
    """An agent is draining its own node (it received SIGTERM: a host shutdown, a spot
    notice): the control plane cordons the node and moves its gangs off it, as it does
    for `cohort node drain` (services/cluster/drains.py); the agent exits once its
    replicas have. An event, not a field of the heartbeat: it is acted on at once (the
    scheduler wakes on it), not a heartbeat interval and a pass later, and it is said
    once, where a beat's flag would have to be kept up until the node is gone."""

    KIND: ClassVar[str] = "node_draining"
    node_id: str
    reason: Annotated[str, _clipped(300)]
    ts: Seconds


# What a node reports: signed with its key (services/wire/signing.py), and applied only to
# replicas that node runs (workers/control/scheduler.py). A `wake` carries nothing to trust.
NodeEvent = ReplicaStarted | ReplicaExited | ReplicaRestarted | ReplicaPreparing | NodeDraining

_KINDS: dict[str, type[Event]] = {
    cls.KIND: cls
    for cls in (
        Wake,
        ReplicaStarted,
        ReplicaExited,
        ReplicaRestarted,
        ReplicaPreparing,
        NodeDraining,
    )
}


def decode_event(fields: dict[str, Any]) -> Event:
    """The event in a stream entry; raises WireError for an unknown kind or bad data."""
    kind = fields.get("kind", "")
    cls = _KINDS.get(kind)
    if cls is None:
        raise WireError("Event", "kind", f"unknown kind {str(kind)[:64]!r}")
    return cls.decode(fields.get("data") or "{}")


Replica = tuple[Id, Attempt, Id]  # (job, attempt, index)


@dataclass(frozen=True, config=STRICT)
class NodeHeartbeat(Contract):
    """A node agent's address, capacity and replicas, every HEARTBEAT_INTERVAL."""

    node_id: Annotated[str, _clipped(64)]
    address: Annotated[str, _clipped(128)]
    slots: Id
    ts: Seconds
    gpus: Id = 0
    # What the agent runs, and the exit codes of what it ran lately: lets the
    # scheduler settle replicas whose events Redis lost.
    replicas: tuple[Replica, ...] = ()
    exited: tuple[tuple[Id, Attempt, Id, Id], ...] = ()  # (job, attempt, index, exit code)
    # The GPUs the agent found (workers/node/gpus.py), the ports of its replica range that
    # other processes hold, and its network stack (workers/node/ports.py).
    gpu_ids: Annotated[tuple[Id, ...], _clipped(64)] = ()
    busy_ports: Annotated[tuple[Id, ...], _clipped(2000)] = ()
    port_space: Annotated[str, _clipped(128)] = ""
    # Each offered GPU's model and total memory in MiB, in the order of `gpu_ids` (NVML's
    # name and memory; ("", 0) where only COHORT_NODE_GPUS named it).
    gpu_models: Annotated[tuple[tuple[Annotated[str, _clipped(96)], Id], ...], _clipped(64)] = ()
    # Replicas whose start it is working on (a checkpoint restored, code or inputs fetched):
    # an agent busy with starts is not judged to leave one unanswered
    # (services/cluster/watchdog.py settle_unanswered_starts).
    preparing: tuple[Replica, ...] = ()
    # True until the agent knows which GPUs it offers (workers/node/gpus.py): until then
    # `gpus` says nothing, and the node is not offered to the placer. An agent that
    # does not send it has always known.
    inventory_pending: bool = False
    # The container engine image jobs' replicas run with here (COHORT_CONTAINER_ENGINE:
    # "docker" or "podman"); "": none, and no job with an `image` is placed here.
    container_engine: Annotated[str, _clipped(16)] = ""
