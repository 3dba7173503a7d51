"""Routes for the node registry."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import SessionDep, TokenDep
from services import nodes
from services.schemas import NodeRead

router = APIRouter(prefix="/nodes", tags=["nodes"])


@router.get("")
def read_nodes(session: SessionDep, _token: TokenDep) -> list[NodeRead]:
    """Every registered node with its slots, free slots and last heartbeat."""
    out = []
    for node, running in nodes.read_nodes(session=session):
        out.append(NodeRead(id=node.id, address=node.address, slots=node.slots, gpus=node.gpus,
                            free_slots=max(0, node.slots - running), running_replicas=running,
                            status=node.status, last_heartbeat=node.last_heartbeat))
    return out
