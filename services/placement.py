"""Gang placement: a pure function from (queue, nodes) to all-or-nothing assignments.

No I/O here, so the rule is tested and benchmarked on its own. The rule:

* Jobs are considered in priority order (high first), then submission order.
* A job is placed whole or not at all: every replica gets a slot (or its GPUs)
  in the same pass, or none does. Two jobs never hold parts of the pool.
* A job that cannot fit even on an empty cluster is *unschedulable*: it waits
  with that reason and does not block the jobs behind it.
* Otherwise the first job that does not fit now stops the pass (strict
  head-of-line order, no backfill): nothing smaller may take the slots the head
  job is waiting for, so the head is never starved.
* `pack` fills the nodes with the most free capacity first (fewest nodes).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class NodeCapacity:
    """What a ready node has free right now."""

    id: str
    address: str
    slots: int  # CPU slots in total
    free_slots: int
    gpus: int = 0  # GPUs in total
    free_gpus: tuple[int, ...] = ()  # ids of the free GPUs


@dataclass(frozen=True)
class GangRequest:
    """A queued job as the placer sees it."""

    job_id: int
    replicas: int
    gpus_per_replica: int = 0
    priority: int = 0
    seq: int = 0  # submission order (the job id does)

    def describe_need(self) -> str:
        if self.gpus_per_replica:
            return f"{self.replicas * self.gpus_per_replica} GPUs " \
                   f"({self.gpus_per_replica} per replica × {self.replicas})"
        return f"{self.replicas} CPU slots"


@dataclass(frozen=True)
class ReplicaPlacement:
    node_id: str
    address: str
    gpu_ids: tuple[int, ...] = ()


@dataclass
class PlacementResult:
    assignments: dict[int, list[ReplicaPlacement]] = field(default_factory=dict)
    waiting: dict[int, str] = field(default_factory=dict)  # job id -> reason


def _fits_on_empty(request: GangRequest, nodes: Sequence[NodeCapacity]) -> bool:
    if request.gpus_per_replica:
        per_node = [n.gpus // request.gpus_per_replica for n in nodes]
    else:
        per_node = [n.slots for n in nodes]
    return sum(per_node) >= request.replicas


def _try_place(
    request: GangRequest, free_slots: dict[str, int], free_gpus: dict[str, list[int]],
    nodes: Sequence[NodeCapacity],
) -> list[ReplicaPlacement] | None:
    """Place every replica or none (`pack`); mutates the free maps only on success.

    Best fit first: the smallest node that holds the whole gang, so big holes stay
    whole for big jobs. Failing that, fill the nodes with the most room first,
    which spans the fewest nodes.
    """
    per = request.gpus_per_replica

    def room(node: NodeCapacity) -> int:  # how many replicas of this job fit on the node
        return len(free_gpus[node.id]) // per if per else free_slots[node.id]

    fits_whole = [n for n in nodes if room(n) >= request.replicas]
    if fits_whole:
        order = [min(fits_whole, key=lambda n: (room(n), n.id))]
    else:
        order = sorted((n for n in nodes if room(n) > 0), key=lambda n: (-room(n), n.id))
    if sum(room(n) for n in order) < request.replicas:
        return None
    placed: list[ReplicaPlacement] = []
    for node in order:
        take = min(room(node), request.replicas - len(placed))
        for _ in range(take):
            gpu_ids: tuple[int, ...] = ()
            if per:
                gpu_ids = tuple(free_gpus[node.id][:per])
                del free_gpus[node.id][:per]
            else:
                free_slots[node.id] -= 1
            placed.append(ReplicaPlacement(node.id, node.address, gpu_ids))
        if len(placed) == request.replicas:
            break
    return placed


def place(queue: Iterable[GangRequest], nodes: Sequence[NodeCapacity]) -> PlacementResult:
    """Assign whole gangs to nodes, in priority then submission order."""
    result = PlacementResult()
    free_slots = {n.id: n.free_slots for n in nodes}
    free_gpus = {n.id: sorted(n.free_gpus) for n in nodes}
    ordered = sorted(queue, key=lambda r: (-r.priority, r.seq))
    blocked_by: GangRequest | None = None
    for request in ordered:
        if not _fits_on_empty(request, nodes):
            total = sum(n.gpus for n in nodes) if request.gpus_per_replica else \
                sum(n.slots for n in nodes)
            unit = "GPUs" if request.gpus_per_replica else "CPU slots"
            result.waiting[request.job_id] = (
                f"unschedulable: needs {request.describe_need()}, "
                f"the registered nodes have {total} {unit} in all"
            )
            continue
        if blocked_by is not None:
            result.waiting[request.job_id] = f"waiting behind job {blocked_by.job_id}"
            continue
        placed = _try_place(request, free_slots, free_gpus, nodes)
        if placed is None:
            free = sum(len(v) for v in free_gpus.values()) if request.gpus_per_replica else \
                sum(free_slots.values())
            unit = "GPUs" if request.gpus_per_replica else "CPU slots"
            result.waiting[request.job_id] = (
                f"waiting for capacity: needs {request.describe_need()}; {free} {unit} free"
            )
            blocked_by = request
            continue
        result.assignments[request.job_id] = placed
    return result


def pick_ports(used: set[int], count: int, start: int, end: int) -> list[int]:
    """The lowest `count` ports in [start, end] not in `used` on one node."""
    ports: list[int] = []
    for port in range(start, end + 1):
        if port not in used:
            ports.append(port)
            if len(ports) == count:
                return ports
    raise ValueError(f"no {count} free ports in {start}-{end}")
