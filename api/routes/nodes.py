"""Routes for the node registry: the nodes, and their drains (admins)."""

from __future__ import annotations

from fastapi import APIRouter, BackgroundTasks

from api.deps import RedisDep, SessionDep, TokenDep, scoped
from api.json_body import CohortRoute
from api.openapi import errors
from services.auth.scopes import Scope
from services.cluster import drains, nodes
from services.jobs.schemas import GpuRead, NodeDrain, NodeRead
from services.models import Node, Replica, utcnow
from services.wire.client import wake_scheduler

router = APIRouter(
    prefix="/nodes",
    tags=["nodes"],
    route_class=CohortRoute,  # a drain's JSON body: non-finite numbers refused (api/json_body.py)
    dependencies=scoped(write=Scope.ADMIN),
)


def _node_view(node: Node, live: list[Replica], mine: list[str]) -> NodeRead:
    gpu_ids = nodes.node_gpu_ids(node)
    used_gpus = {g for r in live if r.gpu_ids for g in nodes.split_ids(r.gpu_ids)}
    cpu_replicas = sum(1 for r in live if not r.gpu_ids)
    return NodeRead(
        id=node.id,
        address=node.address,
        slots=node.slots,
        gpus=node.gpus,
        free_slots=max(0, node.slots - cpu_replicas),
        running_replicas=len(live),
        status=node.status,
        last_heartbeat=node.last_heartbeat,
        gpu_ids=gpu_ids,
        free_gpus=len(set(gpu_ids) - used_gpus),
        replicas=mine,
        gpu_devices=[GpuRead(**gpu) for gpu in nodes.node_gpus(node)],
        container_engine=node.container_engine,
        cordon=node.cordon,
        cordon_reason=node.cordon_reason,
        cordoned_at=node.cordoned_at,
    )


def _one_node(session: SessionDep, token: TokenDep, node_id: str) -> NodeRead:
    session.flush()
    [(node, live, mine)] = nodes.read_node_details(
        session=session, project_id=token.project_id, node_id=node_id
    )
    return _node_view(node, live, mine)


@router.get("")
def read_nodes(session: SessionDep, token: TokenDep) -> list[NodeRead]:
    """Every registered node: address, slots and GPUs, what is free, what runs there."""
    return [
        _node_view(node, live, mine)
        for node, live, mine in nodes.read_node_details(
            session=session, project_id=token.project_id
        )
    ]


@router.post("/{node_id}/drain", responses=errors(404))
def drain_node(
    node_id: str,
    session: SessionDep,
    token: TokenDep,
    bus: RedisDep,
    background: BackgroundTasks,
    drain_in: NodeDrain | None = None,
) -> NodeRead:
    """Drain a node: it takes no new replicas, and every gang with a replica there is
    asked to checkpoint now, then placed elsewhere, resuming from that checkpoint
    (within COHORT_DRAIN_GRACE). A node drained already stays as it was."""
    reason = (drain_in.reason if drain_in else "").strip() or "drained"
    drains.drain_node(
        session=session, node_id=node_id, reason=f"{reason} (by {token.name})", at=utcnow()
    )
    background.add_task(wake_scheduler, bus)  # after the commit: the pass acts on it
    return _one_node(session, token, node_id)


@router.post("/{node_id}/undrain", responses=errors(404))
def undrain_node(node_id: str, session: SessionDep, token: TokenDep) -> NodeRead:
    """Lift a node's cordon (a drain or a quarantine): it takes new replicas again."""
    drains.undrain_node(session=session, node_id=node_id, at=utcnow())
    return _one_node(session, token, node_id)
