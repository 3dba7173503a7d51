"""Free capacity of every ready node, as placement reads it on every pass: slots and
GPUs not held by a live replica, and the ports in use on each node's network stack; and
the nodes whose inventory is pending, which placement is not offered yet.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.cluster.nodes import offered_gpus, split_ids
from services.cluster.placement import NodeCapacity
from services.db import read_rows
from services.models import Node, Replica
from services.statuses import TERMINAL_REPLICA_STATUSES, NodeStatus

# What placement reads of each ready node, in this order; the pass's digest
# (placement_digest.py) covers the same columns, so a change to any of them places again.
PLACED_NODE_COLUMNS = (
    Node.id,
    Node.address,
    Node.slots,
    Node.gpus,
    Node.gpu_ids,
    Node.port_space,
    Node.busy_ports,
    Node.container_engine,
)
# The nodes placement offers: ready (beating, GPUs known) and not cordoned (drained or
# quarantined: services/statuses.py NodeCordon).
PLACEABLE_NODE = sa.and_(Node.status == NodeStatus.READY, Node.cordon.is_(None))


def read_pending(*, session: Session) -> list[str]:
    """The nodes whose agents beat but have not yet listed their GPUs, in id order: not
    offered to placement (read_capacity), and no job is unschedulable while they are."""
    return list(
        session.execute(
            sa.select(Node.id).where(Node.status == NodeStatus.PENDING).order_by(Node.id)
        ).scalars()
    )


def read_capacity(*, session: Session) -> tuple[list[NodeCapacity], dict[str, set[int]]]:
    """Free capacity of every ready node, and the ports in use on each node."""
    used_slots: dict[str, int] = {}
    used_gpus: dict[str, set[int]] = {}
    used_ports: dict[str, set[int]] = {}
    # Three columns of each live replica, not whole rows: read on every pass.
    for node_id, port, gpu_ids in read_rows(
        session,
        sa.select(
            Replica.node_id,
            Replica.port,
            Replica.gpu_ids,
        ).where(Replica.status.not_in(TERMINAL_REPLICA_STATUSES)),
    ):
        used_ports.setdefault(node_id, set()).add(port)
        if not gpu_ids:  # a GPU replica holds GPUs, not a CPU slot (placement.py)
            used_slots[node_id] = used_slots.get(node_id, 0) + 1
        else:
            used_gpus.setdefault(node_id, set()).update(int(g) for g in gpu_ids.split(","))
    # The columns placement needs of each ready node, not whole rows: read on every pass.
    nodes = read_rows(
        session,
        sa.select(*PLACED_NODE_COLUMNS).where(PLACEABLE_NODE).order_by(Node.id),
    )
    capacity = []
    # Nodes on one network stack (several agents on one host) draw from one set of
    # ports: the same set object, so a port chosen for one is taken for all of them.
    spaces: dict[str, set[int]] = {}
    for node_id, address, slots, gpus, gpu_ids, port_space, busy_ports, engine in nodes:
        held = used_gpus.get(node_id, ())
        capacity.append(
            NodeCapacity(
                id=node_id,
                address=address,
                slots=slots,
                free_slots=max(0, slots - used_slots.get(node_id, 0)),
                gpus=gpus,
                free_gpus=tuple(g for g in offered_gpus(gpu_ids, gpus) if g not in held),
                engine=engine,
            )
        )
        shared = spaces.setdefault(port_space or f"address:{address}", set())
        shared.update(used_ports.get(node_id, ()))
        if busy_ports:
            shared.update(split_ids(busy_ports))  # held by processes outside Cohort
        used_ports[node_id] = shared
    return capacity, used_ports
