"""Gang placement: a pure function from (queue, nodes) to all-or-nothing assignments.

No I/O here, so the rule is tested (property tests) and benchmarked on its own.

The rule:

* Jobs are considered in priority order (high first); among jobs of equal priority,
  projects take turns by their share of the cluster, and each project's jobs go in
  submission order (fair_share.py). A job its project's running quota cannot take now
  waits with that reason and holds nothing.
* A job is placed whole or not at all: every replica gets its CPU slot (or its
  GPUs) in the same pass, or none does. Two jobs never hold parts of the pool
  while waiting for each other.
* A job that cannot fit even on an empty cluster is *unschedulable*: it waits
  with that reason and blocks nobody.
* Backfill, "reserve what the blocked job can use": a job that does not fit now
  holds every node that could ever host one of its replicas, for its kind of
  capacity (a CPU job: every node's CPU slots; a job of g GPUs per replica: the
  GPUs of every node with at least g GPUs). Jobs behind it may start only on
  what no blocked job ahead of them can use: CPU slots while a GPU job waits,
  GPUs while a CPU job waits, or GPUs on nodes too small for the waiting job's
  replicas. Why this rule: Cohort knows no run times, so EASY backfill's "ends
  before the head's reserved start" cannot be computed; this is the part of it
  that needs no estimate. Anything a waiting job could use might be exactly what
  it needs next, so giving it away could delay it, perhaps forever (a stream of
  small jobs starving a big one). Capacity it can never use delays it by nothing.
* Policy per job: `pack` (default) puts the whole gang on the smallest node that
  holds it, else fills the fullest nodes first: the fewest nodes, and big holes
  stay whole for big jobs. `spread` puts one replica per node on as many nodes
  as possible, the emptiest first.
* A job with an `image` goes only to nodes whose agent has a container engine, and
  waits with NO_ENGINE while no ready node has one; what it holds back when blocked is
  those nodes' capacity only.

Cost: one sort of the queue (per priority and project; where several projects share a
priority, a heap of them: log P per job), then per job a walk over at most one bucket per
distinct free count (see placement_pool.py); a job behind a blocked one is
usually answered in O(1) because the capacity it could use has been withdrawn.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import NamedTuple

from services.cluster.fair_share import FairQueue, ProjectState
from services.cluster.placement_pool import Pool, choose
from services.cluster.placement_roles import GangPart, choose_parts

PACK, SPREAD = "pack", "spread"
UNSCHEDULABLE = "unschedulable: "  # how the reason of a job no cluster this size fits starts
POLICIES = (PACK, SPREAD)
NO_ENGINE = "waiting: no ready node runs containers (an agent needs COHORT_CONTAINER_ENGINE)"
CPU, GPU = "cpu", "gpu"


@dataclass(frozen=True)
class NodeCapacity:
    """What a ready node has free right now."""

    id: str
    address: str
    slots: int  # CPU slots in total
    free_slots: int
    gpus: int = 0  # GPUs in total
    free_gpus: tuple[int, ...] = ()  # ids of the free GPUs
    engine: str = ""  # its agent's container engine ("": takes no job with an `image`)


class GangRequest(NamedTuple):
    """A queued job as the placer sees it. (A tuple: a pass makes one per queued job,
    and a frozen dataclass's __init__ costs several times a tuple's.)"""

    job_id: int
    replicas: int
    gpus_per_replica: int = 0
    priority: int = 0
    seq: int = 0  # submission order (the job id does)
    policy: str = PACK
    project: int = 0  # whose job: fair sharing and quotas are per project
    # Parts with constraints (a parameter_server gang: placement_roles.py); empty: the
    # whole gang is one part of interchangeable replicas.
    parts: tuple[GangPart, ...] = ()
    container: bool = False  # the job has an `image`: nodes with an engine only

    @property
    def kind(self) -> str:
        return GPU if self.gpus_per_replica else CPU

    @property
    def per(self) -> int:
        """Units of its kind one replica takes."""
        return self.gpus_per_replica or 1

    def describe_need(self) -> str:
        if self.gpus_per_replica:
            return (
                f"{self.replicas * self.gpus_per_replica} GPUs "
                f"({self.gpus_per_replica} per replica × {self.replicas})"
            )
        return f"{self.replicas} CPU slots"


class ReplicaPlacement(NamedTuple):
    """Where one replica goes. A tuple, not a frozen dataclass: a pass makes one per
    placed replica, tens of thousands, and a frozen dataclass's __init__ costs several
    times a tuple's."""

    node_id: str
    address: str
    gpu_ids: tuple[int, ...] = ()


@dataclass
class PlacementResult:
    assignments: dict[int, list[ReplicaPlacement]] = field(default_factory=dict)
    waiting: dict[int, str] = field(default_factory=dict)  # job id -> reason
    positions: dict[int, int] = field(default_factory=dict)  # job id -> place among waiting, 1..
    order: list[int] = field(default_factory=list)  # job ids in the order considered

    def wait(self, job_id: int, reason: str) -> None:
        """The job waits, behind those that waited before it in this pass."""
        self.positions[job_id] = len(self.positions) + 1
        self.waiting[job_id] = reason


class _Cluster:
    """The pass's mutable view of the nodes: one pool per kind, reservations."""

    def __init__(self, nodes: Sequence[NodeCapacity]) -> None:
        self.nodes = {n.id: n for n in nodes}
        self.totals = {
            CPU: {n.id: max(0, n.slots) for n in nodes},
            GPU: {n.id: max(0, n.gpus) for n in nodes},
        }
        self.pools = {
            CPU: Pool({n.id: max(0, min(n.free_slots, n.slots)) for n in nodes}),
            GPU: Pool({n.id: len(n.free_gpus) for n in nodes}),
        }
        self.free_gpus = {n.id: sorted(n.free_gpus) for n in nodes if n.free_gpus}
        self.free_units = {kind: pool.units for kind, pool in self.pools.items()}
        self.total_units = {kind: sum(t.values()) for kind, t in self.totals.items()}
        self.largest = {kind: max(t.values(), default=0) for kind, t in self.totals.items()}
        # Nodes that take no job with an `image`: withdrawn while one is placed.
        self.engineless = [n.id for n in nodes if not n.engine]
        self.any_engine = len(self.engineless) < len(nodes)
        self._empty: dict[tuple[str, int, bool], list[int]] = {}
        self._fits: dict[tuple[str, int, str, tuple[GangPart, ...], bool], bool] = {}
        self._empty_pools: dict[tuple[str, bool], Pool] = {}
        # Reservations: nodes by total capacity, largest first; every node whose
        # total is >= the smallest per-replica need of a blocked job is held.
        # reverse=True keeps equal totals in node order, as a sort by -total does.
        self._by_total = {
            kind: sorted(t, key=t.__getitem__, reverse=True) for kind, t in self.totals.items()
        }
        self._held_upto = {CPU: 0, GPU: 0}

    def totals_for(self, kind: str, container: bool) -> dict[str, int]:
        """Each node's total of `kind`; for a job with an image, of nodes with an engine."""
        totals = self.totals[kind]
        if not container:
            return totals
        return {n: t for n, t in totals.items() if self.nodes[n].engine}

    def empty_rooms(self, kind: str, per: int, container: bool = False) -> list[int]:
        """Prefix sums of replicas-that-fit per node on an empty cluster, largest first."""
        key = (kind, per, container)
        if key not in self._empty:
            totals = self.totals_for(kind, container).values()
            rooms = sorted((t // per for t in totals), reverse=True)
            self._empty[key] = list(accumulate(r for r in rooms if r))
        return self._empty[key]

    def withdraw_engineless(self, pool: Pool) -> dict[str, int]:
        """Take the nodes without an engine out of `pool`; what `give_back` returns."""
        taken = {node_id: pool.remove(node_id) for node_id in self.engineless}
        return {node_id: units for node_id, units in taken.items() if units}

    def reserve(self, kind: str, per: int, container: bool = False) -> None:
        """Withhold from later jobs every node that could host a replica of `per` units
        (of a job with an image: every such node with an engine)."""
        if container:
            for node_id, total in self.totals_for(kind, True).items():
                if total >= per:
                    self.pools[kind].remove(node_id)
            return
        order, totals, pool = self._by_total[kind], self.totals[kind], self.pools[kind]
        i = self._held_upto[kind]
        while i < len(order) and totals[order[i]] >= per:
            pool.remove(order[i])
            i += 1
        self._held_upto[kind] = i

    def parts_fit_empty(self, request: GangRequest, kind: str, per: int) -> bool:
        """Whether a gang's parts fit the whole cluster, empty (else it is unschedulable)."""
        # Gangs of the same shape have the same answer; one pool of the empty cluster
        # serves every shape (choose_parts gives back what it borrows).
        key = (kind, per, request.policy, request.parts, request.container)
        if key not in self._fits:
            empty = (kind, request.container)
            if empty not in self._empty_pools:
                self._empty_pools[empty] = Pool(dict(self.totals_for(kind, request.container)))
            self._fits[key] = (
                choose_parts(self._empty_pools[empty], request.parts, per, request.policy == SPREAD)
                is not None
            )
        return self._fits[key]

    def commit_parts(
        self, request: GangRequest, kind: str, per: int, chosen: list[list[tuple[str, int]]]
    ) -> list[ReplicaPlacement]:
        """Take each part's nodes; the placements in replica index order."""
        by_index: dict[int, ReplicaPlacement] = {}
        for part, nodes in zip(request.parts, chosen, strict=True):
            placed = self.commit(part.count, request.gpus_per_replica, kind, per, nodes)
            by_index.update(zip(part.indexes, placed, strict=True))
        return [by_index[i] for i in range(request.replicas)]

    def commit(
        self, count: int, gpus_per_replica: int, kind: str, per: int, chosen: list[tuple[str, int]]
    ) -> list[ReplicaPlacement]:
        pool = self.pools[kind]
        placed: list[ReplicaPlacement] = []
        for node_id, count in chosen:
            pool.take(node_id, count * per)
            address = self.nodes[node_id].address
            if not gpus_per_replica:  # immutable and alike: one for the node's replicas
                placed.extend([ReplicaPlacement(node_id, address)] * count)
                continue
            ids = self.free_gpus[node_id]
            for _ in range(count):
                placed.append(ReplicaPlacement(node_id, address, tuple(ids[:per])))
                del ids[:per]
        self.free_units[kind] -= count * per
        return placed


def place(
    queue: Iterable[GangRequest],
    nodes: Sequence[NodeCapacity],
    projects: Mapping[int, ProjectState] | None = None,
) -> PlacementResult:
    """Assign whole gangs to nodes, in priority then fair order (see the module rule).

    `projects`: what each project holds now and its running quotas (none: no quotas,
    and every project starts the pass holding nothing).
    """
    result = PlacementResult()
    cluster = _Cluster(nodes)
    fair = FairQueue(queue, projects or {}, cluster.total_units[CPU], cluster.total_units[GPU])
    # kind -> the first job of that kind that waits for capacity (its id and project)
    first_blocked: dict[str, tuple[int, int]] = {}
    for request in fair:
        result.order.append(request.job_id)
        # Locals, not properties: this loop runs once per queued job.
        per = request.gpus_per_replica or 1
        kind = GPU if request.gpus_per_replica else CPU
        rooms = cluster.empty_rooms(kind, per, request.container)
        why = _unschedulable(cluster, request, kind, per, rooms) or fair.quota_wait(request)
        if why is not None:
            result.wait(request.job_id, why)
            continue
        pool = cluster.pools[kind]
        # A job with an image sees the nodes with an engine only (given back below).
        withdrawn = cluster.withdraw_engineless(pool) if request.container else {}
        parts, chosen = None, None
        if not request.parts:
            chosen = choose(pool, request.replicas, per, request.policy == SPREAD)
        elif pool.units >= request.replicas * per:
            parts = choose_parts(pool, request.parts, per, request.policy == SPREAD)
        for node_id, units in withdrawn.items():
            pool.give(node_id, units)
        if chosen is None and parts is None:
            result.wait(request.job_id, _blocked(cluster, request, kind, rooms, first_blocked))
            cluster.reserve(kind, per, request.container)
            continue
        if parts is not None:
            result.assignments[request.job_id] = cluster.commit_parts(request, kind, per, parts)
        else:
            assert chosen is not None
            result.assignments[request.job_id] = cluster.commit(
                request.replicas, request.gpus_per_replica, kind, per, chosen
            )
        fair.took(request)
    return result


def _unit(kind: str) -> str:
    return "GPUs" if kind == GPU else "CPU slots"


def _unschedulable(
    cluster: _Cluster, request: GangRequest, kind: str, per: int, rooms: list[int]
) -> str | None:
    """Why the job can never be placed, even on the empty cluster; None if it can."""
    if request.container and not cluster.any_engine:
        return NO_ENGINE
    if (
        rooms
        and rooms[-1] >= request.replicas
        and not (request.parts and not cluster.parts_fit_empty(request, kind, per))
    ):
        return None
    totals = cluster.totals_for(kind, request.container).values()
    total, per_node = sum(totals), max(totals, default=0)
    where = "the nodes that run containers have" if request.container else "the cluster has"
    detail = f"{where} {total} {_unit(kind)}"
    if request.gpus_per_replica and total >= request.replicas * per:
        detail += f", at most {per_node} on one node"
    return f"{UNSCHEDULABLE}needs {request.describe_need()}, {detail}"


def _blocked(
    cluster: _Cluster,
    request: GangRequest,
    kind: str,
    rooms: list[int],
    first_blocked: dict[str, tuple[int, int]],
) -> str:
    """Why a job that fits the empty cluster waits now; the first such job of its kind
    is noted in `first_blocked` (what it needs is held for it)."""
    min_nodes = bisect_left(rooms, request.replicas) + 1
    reason = (
        f"needs {request.describe_need()} on ≥{min_nodes} "
        f"node{'s' if min_nodes > 1 else ''}; "
        f"{cluster.free_units[kind]} {_unit(kind)} free"
    )
    if kind not in first_blocked:
        first_blocked[kind] = (request.job_id, request.project)
        return reason
    ahead, owner = first_blocked[kind]
    # Another project's job is not this caller's to know by id.
    if owner == request.project:
        return reason + f", held for job {ahead} ahead in the queue"
    return reason + ", held for a job of another project ahead in the queue"


def pick_ports(used: set[int], count: int, start: int, end: int) -> list[int]:
    """The lowest `count` ports in [start, end] not in `used` on one node."""
    ports: list[int] = []
    for port in range(start, end + 1):
        if port not in used:
            ports.append(port)
            if len(ports) == count:
                return ports
    raise ValueError(f"no {count} free ports in {start}-{end}")
