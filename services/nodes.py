"""Node registry: heartbeats in, lost nodes out, free capacity for placement."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.models import Node, Replica
from services.placement import NodeCapacity
from services.statuses import TERMINAL_REPLICA_STATUSES, NodeStatus


@dataclass(frozen=True)
class Heartbeat:
    node_id: str
    address: str
    slots: int
    gpus: int
    at: dt.datetime


def record_heartbeat(*, session: Session, beat: Heartbeat) -> Node:
    """Register a node or refresh it; a lost node that beats again is ready again."""
    node = session.get(Node, beat.node_id)
    if node is None:
        node = Node(id=beat.node_id, address=beat.address, slots=beat.slots, gpus=beat.gpus,
                    last_heartbeat=beat.at, registered_at=beat.at)
        session.add(node)
    elif beat.at > node.last_heartbeat:  # only a new beat counts (the hash keeps the last one)
        node.address, node.slots, node.gpus = beat.address, beat.slots, beat.gpus
        node.last_heartbeat = beat.at
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
        used_slots[replica.node_id] = used_slots.get(replica.node_id, 0) + 1
        used_ports.setdefault(replica.node_id, set()).add(replica.port)
        if replica.gpu_ids:
            used_gpus.setdefault(replica.node_id, set()).update(
                int(g) for g in replica.gpu_ids.split(","))
    nodes = session.execute(
        sa.select(Node).where(Node.status == NodeStatus.READY).order_by(Node.id)
    ).scalars()
    capacity = [
        NodeCapacity(
            id=node.id, address=node.address, slots=node.slots,
            free_slots=max(0, node.slots - used_slots.get(node.id, 0)), gpus=node.gpus,
            free_gpus=tuple(g for g in range(node.gpus) if g not in used_gpus.get(node.id, set())),
        )
        for node in nodes
    ]
    return capacity, used_ports
