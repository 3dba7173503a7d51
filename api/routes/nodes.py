"""Routes for the node registry."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import SessionDep, TokenDep, scoped
from services.auth.scopes import Scope
from services.cluster import nodes
from services.jobs.schemas import GpuRead, NodeRead

router = APIRouter(prefix="/nodes", tags=["nodes"], dependencies=scoped(write=Scope.ADMIN))


@router.get("")
def read_nodes(session: SessionDep, token: TokenDep) -> list[NodeRead]:
    """Every registered node: address, slots and GPUs, what is free, what runs there."""
    out = []
    for node, live, mine in nodes.read_node_details(session=session, project_id=token.project_id):
        gpu_ids = nodes.node_gpu_ids(node)
        used_gpus = {g for r in live if r.gpu_ids for g in nodes.split_ids(r.gpu_ids)}
        cpu_replicas = sum(1 for r in live if not r.gpu_ids)
        out.append(
            NodeRead(
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
        )
    return out
