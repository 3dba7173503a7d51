"""Node registry: heartbeats in, lost nodes out, free capacity for placement."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.cluster.placement import NodeCapacity
from services.models import Job, Node, Replica
from services.statuses import TERMINAL_REPLICA_STATUSES, NodeStatus
from services.wire.events import NodeHeartbeat


@dataclass(frozen=True)
class Heartbeat:
    node_id: str
    address: str
    slots: int
    gpus: int
    at: dt.datetime
    # What the agent itself says it runs, and the exit codes of what it ran
    # lately: lets the scheduler settle replicas whose events Redis lost.
    running: frozenset[tuple[int, int, int]] = frozenset()
    exited: dict[tuple[int, int, int], int] = field(default_factory=dict, hash=False)
    # The ids of the GPUs the agent found (workers/node/gpus.py), and the ports of its
    # replica range that other processes hold (workers/node/ports.py).
    gpu_ids: tuple[int, ...] = ()
    busy_ports: frozenset[int] = frozenset()
    port_space: str = ""  # the agent's network stack (workers/node/ports.py): shared ports
    gpu_models: tuple[tuple[str, int], ...] = ()  # (model, MiB) per id of gpu_ids


def heartbeat_of(beat: NodeHeartbeat) -> Heartbeat:
    """The scheduler's view of a heartbeat an agent sent (decoded and checked)."""
    return Heartbeat(node_id=beat.node_id, address=beat.address, slots=beat.slots,
                     gpus=beat.gpus, at=dt.datetime.fromtimestamp(beat.ts, dt.UTC),
                     running=frozenset(beat.replicas),
                     exited={(job, attempt, index): code
                             for job, attempt, index, code in beat.exited},
                     gpu_ids=beat.gpu_ids, busy_ports=frozenset(beat.busy_ports),
                     port_space=beat.port_space, gpu_models=beat.gpu_models)


def gpu_inventory(beat: Heartbeat) -> list[dict[str, Any]]:
    """What the nodes table keeps of each GPU: its id, model and memory (MiB)."""
    models = list(beat.gpu_models) + [("", 0)] * (len(beat.gpu_ids) - len(beat.gpu_models))
    return [{"index": index, "name": name, "memory_mb": memory}
            for index, (name, memory) in zip(beat.gpu_ids, models, strict=False)]


def _join(values: Iterable[int]) -> str:
    return ",".join(str(v) for v in sorted(values))


def split_ids(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip().isdigit()]


def node_gpu_ids(node: Node) -> list[int]:
    """The GPU ids a node offers: the ones its agent found, else 0..gpus-1."""
    return split_ids(node.gpu_ids)[:node.gpus] if node.gpu_ids else list(range(node.gpus))


def node_gpus(node: Node) -> list[dict[str, Any]]:
    """Each GPU a node offers with its model and memory (MiB), in id order."""
    known = {int(g["index"]): g for g in node.gpu_inventory or [] if "index" in g}
    return [known.get(index, {"index": index, "name": "", "memory_mb": 0})
            for index in node_gpu_ids(node)]


def record_heartbeat(*, session: Session, beat: Heartbeat) -> Node:
    """Register a node or refresh it; a lost node that beats again is ready again."""
    node = session.get(Node, beat.node_id)
    if node is None:
        node = Node(id=beat.node_id, address=beat.address, slots=beat.slots, gpus=beat.gpus,
                    last_heartbeat=beat.at, registered_at=beat.at,
                    gpu_ids=_join(beat.gpu_ids), busy_ports=_join(beat.busy_ports),
                    port_space=beat.port_space, gpu_inventory=gpu_inventory(beat))
        session.add(node)
    elif beat.at > node.last_heartbeat:  # only a new beat counts (the hash keeps the last one)
        node.address, node.slots, node.gpus = beat.address, beat.slots, beat.gpus
        node.last_heartbeat = beat.at
        node.gpu_ids, node.busy_ports = _join(beat.gpu_ids), _join(beat.busy_ports)
        node.port_space = beat.port_space
        node.gpu_inventory = gpu_inventory(beat)
        node.status = NodeStatus.READY
    session.flush()
    return node


def mark_lost_nodes(*, session: Session, now: dt.datetime, timeout: float) -> list[str]:
    """Mark ready nodes whose last heartbeat is older than `timeout` seconds as lost."""
    cutoff = now - dt.timedelta(seconds=timeout)
    lost = list(session.execute(
        sa.select(Node).where(Node.status == NodeStatus.READY, Node.last_heartbeat < cutoff)
    ).scalars())
    for node in lost:
        node.status = NodeStatus.LOST
    session.flush()
    return [node.id for node in lost]


def _live_replicas(session: Session) -> list[Replica]:
    return list(session.execute(
        sa.select(Replica).where(Replica.status.not_in(TERMINAL_REPLICA_STATUSES))
    ).scalars())


def read_nodes(*, session: Session) -> list[tuple[Node, int]]:
    """Every node with the number of live replicas on it."""
    counts: dict[str, int] = {}
    for replica in _live_replicas(session):
        counts[replica.node_id] = counts.get(replica.node_id, 0) + 1
    nodes = session.execute(sa.select(Node).order_by(Node.id)).scalars()
    return [(node, counts.get(node.id, 0)) for node in nodes]


def read_capacity(*, session: Session) -> tuple[list[NodeCapacity], dict[str, set[int]]]:
    """Free capacity of every ready node, and the ports in use on each node."""
    used_slots: dict[str, int] = {}
    used_gpus: dict[str, set[int]] = {}
    used_ports: dict[str, set[int]] = {}
    for replica in _live_replicas(session):
        used_ports.setdefault(replica.node_id, set()).add(replica.port)
        if not replica.gpu_ids:  # a GPU replica holds GPUs, not a CPU slot (placement.py)
            used_slots[replica.node_id] = used_slots.get(replica.node_id, 0) + 1
        if replica.gpu_ids:
            used_gpus.setdefault(replica.node_id, set()).update(
                int(g) for g in replica.gpu_ids.split(","))
    nodes = list(session.execute(
        sa.select(Node).where(Node.status == NodeStatus.READY).order_by(Node.id)
    ).scalars())
    capacity = [
        NodeCapacity(
            id=node.id, address=node.address, slots=node.slots,
            free_slots=max(0, node.slots - used_slots.get(node.id, 0)), gpus=node.gpus,
            free_gpus=tuple(g for g in node_gpu_ids(node)
                            if g not in used_gpus.get(node.id, set())),
        )
        for node in nodes
    ]
    # Nodes on one network stack (several agents on one host) draw from one set of
    # ports: the same set object, so a port chosen for one is taken for all of them.
    spaces: dict[str, set[int]] = {}
    for node in nodes:
        shared = spaces.setdefault(node.port_space or f"address:{node.address}", set())
        shared.update(used_ports.get(node.id, set()))
        shared.update(split_ids(node.busy_ports))  # held by processes outside Cohort
        used_ports[node.id] = shared
    return capacity, used_ports


def read_node_details(*, session: Session, project_id: int
                      ) -> list[tuple[Node, list[Replica], list[str]]]:
    """Every node with all its live replicas, and the names of those of `project_id`.

    The names ('job/attempt/index') are the caller's own only: other projects'
    jobs are not theirs to see, only counted.
    """
    by_node: dict[str, list[Replica]] = {}
    mine: dict[str, list[str]] = {}
    rows = session.execute(
        sa.select(Replica, Job.project_id).join(Job, Job.id == Replica.job_id)
        .where(Replica.status.not_in(TERMINAL_REPLICA_STATUSES))
        .order_by(Replica.job_id, Replica.attempt, Replica.index)
    ).all()
    for replica, owner in rows:
        by_node.setdefault(replica.node_id, []).append(replica)
        if owner == project_id:
            mine.setdefault(replica.node_id, []).append(
                f"{replica.job_id}/{replica.attempt}/{replica.index}")
    nodes = session.execute(sa.select(Node).order_by(Node.id)).scalars()
    return [(node, by_node.get(node.id, []), mine.get(node.id, [])) for node in nodes]
