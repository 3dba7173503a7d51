"""Node registry: heartbeats in, lost nodes out, nodes and their replicas read for views.

The free capacity placement reads is node_capacity.py's.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.orm.util import identity_key

from services.cluster.arrivals import Heard
from services.db import read_rows
from services.models import Job, Node, Replica
from services.statuses import LIVE_NODE_STATUSES, TERMINAL_REPLICA_STATUSES, NodeStatus
from services.wire.events import NodeHeartbeat


@dataclass(frozen=True)
class Heartbeat:
    node_id: str
    address: str
    slots: int
    gpus: int
    at: dt.datetime  # when the control plane first saw this beat, on its clock (arrivals.py)
    # What the agent itself says it runs, and the exit codes of what it ran
    # lately: lets the scheduler settle replicas whose events Redis lost.
    running: frozenset[tuple[int, int, int]] = frozenset()
    exited: dict[tuple[int, int, int], int] = field(default_factory=dict, hash=False)
    preparing: frozenset[tuple[int, int, int]] = frozenset()  # starts being worked on
    # The ids of the GPUs the agent found (workers/node/gpus.py), and the ports of its
    # replica range that other processes hold (workers/node/ports.py).
    gpu_ids: tuple[int, ...] = ()
    busy_ports: frozenset[int] = frozenset()
    port_space: str = ""  # the agent's network stack (workers/node/ports.py): shared ports
    gpu_models: tuple[tuple[str, int], ...] = ()  # (model, MiB) per id of gpu_ids
    inventory_pending: bool = False  # the agent does not know its GPUs yet: not placed on
    container_engine: str = ""  # what runs image jobs' replicas there ("": none)
    # The beat was written after this time (the control plane's read before the one that
    # saw it); None when its age is unknown (there at a leader's first read): no news.
    after: dt.datetime | None = None

    @property
    def news(self) -> bool:
        """Whether the beat was written while the control plane was watching."""
        return self.after is not None


def _utc(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, dt.UTC)


def heartbeat_of(beat: NodeHeartbeat, heard: Heard) -> Heartbeat:
    """The scheduler's view of a heartbeat an agent sent (decoded and checked), timed by
    when the control plane saw it: `beat.ts` is the agent's clock, never compared."""
    return Heartbeat(
        node_id=beat.node_id,
        address=beat.address,
        slots=beat.slots,
        gpus=beat.gpus,
        at=_utc(heard.at),
        after=None if heard.after is None else _utc(heard.after),
        running=frozenset(beat.replicas),
        preparing=frozenset(beat.preparing),
        exited={(job, attempt, index): code for job, attempt, index, code in beat.exited},
        gpu_ids=beat.gpu_ids,
        busy_ports=frozenset(beat.busy_ports),
        port_space=beat.port_space,
        gpu_models=beat.gpu_models,
        inventory_pending=beat.inventory_pending,
        container_engine=beat.container_engine,
    )


def gpu_inventory(beat: Heartbeat) -> list[dict[str, Any]]:
    """What the nodes table keeps of each GPU: its id, model and memory (MiB)."""
    models = list(beat.gpu_models) + [("", 0)] * (len(beat.gpu_ids) - len(beat.gpu_models))
    return [
        {"index": index, "name": name, "memory_mb": memory}
        for index, (name, memory) in zip(beat.gpu_ids, models, strict=False)
    ]


def _join(values: Iterable[int]) -> str:
    return ",".join(str(v) for v in sorted(values))


def split_ids(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip().isdigit()]


def node_gpu_ids(node: Node) -> list[int]:
    """The GPU ids a node offers: the ones its agent found, else 0..gpus-1."""
    return offered_gpus(node.gpu_ids, node.gpus)


def offered_gpus(gpu_ids: str, gpus: int) -> list[int]:
    return split_ids(gpu_ids)[:gpus] if gpu_ids else list(range(gpus))


def node_gpus(node: Node) -> list[dict[str, Any]]:
    """Each GPU a node offers with its model and memory (MiB), in id order."""
    known = {int(g["index"]): g for g in node.gpu_inventory or [] if "index" in g}
    return [
        known.get(index, {"index": index, "name": "", "memory_mb": 0})
        for index in node_gpu_ids(node)
    ]


def record_heartbeat(*, session: Session, beat: Heartbeat) -> Node:
    """Register a node or refresh it (record_heartbeats for one beat)."""
    record_heartbeats(session=session, beats=[beat])
    node = session.get(Node, beat.node_id)
    assert node is not None  # registered just above
    return node


# What a heartbeat sets on its node's row (`_changes`), read as columns on every pass.
_BEAT_FIELDS = (
    "address",
    "slots",
    "gpus",
    "last_heartbeat",
    "gpu_ids",
    "busy_ports",
    "port_space",
    "gpu_inventory",
    "container_engine",
    "status",
)


# A node's beat columns as a pass left them: {node id: {field of _BEAT_FIELDS: value}}.
NodeRows = dict[str, dict[str, Any]]


def record_heartbeats(
    *, session: Session, beats: list[Heartbeat], known: NodeRows | None = None
) -> NodeRows:
    """Register a node or refresh it, for every agent's last beat; a lost node that beats
    again (news) is ready again. One batch of updates per set of changed columns (mostly
    the time alone): no ORM object per node. Returns the beating nodes' beat columns as
    they now stand.

    `known`: what the leader's last committed pass returned (then adjusted for the nodes
    it marked lost: `mark_rows_lost`). Only the leader's passes write these columns, so
    it is the rows as they stand, and only nodes missing from it are read (as columns):
    reading 1,000 nodes' rows again was a tenth of a full pass. None: read them all."""
    if not beats:
        return {}
    table = cast(sa.Table, Node.__table__)  # a mapped class's table is a Table
    known = known or {}
    stored = {beat.node_id: dict(known[beat.node_id]) for beat in beats if beat.node_id in known}
    unknown = {beat.node_id for beat in beats} - stored.keys()
    if unknown:
        stored.update(
            {
                row[0]: dict(zip(_BEAT_FIELDS, row[1:], strict=True))
                for row in read_rows(
                    session,
                    sa.select(table.c.id, *(table.c[name] for name in _BEAT_FIELDS)).where(
                        table.c.id.in_(unknown)
                    ),
                )
            }
        )
    batches: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for beat in beats:
        current = stored.get(beat.node_id)
        if current is None:
            new = _new_node(beat)
            session.add(new)
            stored[beat.node_id] = {name: getattr(new, name) for name in _BEAT_FIELDS}
            continue
        changes = _changes(current, beat)
        if changes:
            current.update(changes)
            batches.setdefault(tuple(sorted(changes)), []).append(
                {"node_id": beat.node_id, **{f"new_{k}": v for k, v in changes.items()}}
            )
    session.flush()  # the new nodes, before any update of them
    for names, rows in batches.items():
        session.execute(
            sa.update(table)
            .where(table.c.id == sa.bindparam("node_id"))
            .values({name: sa.bindparam(f"new_{name}") for name in names}),
            rows,
        )
        # Nodes this session already holds (a caller's) show the new values too.
        for row in rows:
            held = session.identity_map.get(identity_key(Node, row["node_id"]))
            if isinstance(held, Node):
                for name in names:
                    set_committed_value(held, name, row[f"new_{name}"])
    return stored


def mark_rows_lost(rows: NodeRows, lost: Iterable[str]) -> None:
    """What `mark_lost_nodes` wrote, in a pass's NodeRows."""
    for node_id in lost:
        if node_id in rows:
            rows[node_id]["status"] = NodeStatus.LOST


def _new_node(beat: Heartbeat) -> Node:
    return Node(
        id=beat.node_id,
        address=beat.address,
        slots=beat.slots,
        gpus=beat.gpus,
        last_heartbeat=beat.at,
        registered_at=beat.at,
        status=_live_status(beat),
        gpu_ids=_join(beat.gpu_ids),
        busy_ports=_join(beat.busy_ports),
        port_space=beat.port_space,
        gpu_inventory=gpu_inventory(beat),
        container_engine=beat.container_engine,
    )


def _live_status(beat: Heartbeat) -> NodeStatus:
    """A beating node is ready, or pending while its agent's GPU inventory is."""
    return NodeStatus.PENDING if beat.inventory_pending else NodeStatus.READY


def _changes(current: dict[str, Any], beat: Heartbeat) -> dict[str, Any]:
    """What `beat` changes on a node whose row holds `current`: nothing unless the beat
    is newer than the last one recorded (the hash keeps an agent's last beat)."""
    if beat.at <= current["last_heartbeat"]:
        return {}
    fresh: dict[str, Any] = {
        "address": beat.address,
        "slots": beat.slots,
        "gpus": beat.gpus,
        "last_heartbeat": beat.at,
        "gpu_ids": _join(beat.gpu_ids),
        "busy_ports": _join(beat.busy_ports),
        "port_space": beat.port_space,
        "gpu_inventory": gpu_inventory(beat),
        "container_engine": beat.container_engine,
    }
    # A beat of unknown age (a new leader's first read) gives a live node one more
    # NODE_TIMEOUT; only a beat written while the control plane watched revives a
    # lost one (the dead node's last beat stays in the hash).
    if beat.news or current["status"] != NodeStatus.LOST:
        fresh["status"] = _live_status(beat)
    return {name: value for name, value in fresh.items() if current[name] != value}


def mark_lost_nodes(*, session: Session, now: dt.datetime, timeout: float) -> list[str]:
    """Mark live nodes whose last heartbeat is older than `timeout` seconds as lost."""
    cutoff = now - dt.timedelta(seconds=timeout)
    lost = list(
        session.execute(
            sa.select(Node).where(Node.status.in_(LIVE_NODE_STATUSES), Node.last_heartbeat < cutoff)
        ).scalars()
    )
    for node in lost:
        node.status = NodeStatus.LOST
    session.flush()
    return [node.id for node in lost]


def _live_replicas(session: Session) -> list[Replica]:
    return list(
        session.execute(
            sa.select(Replica).where(Replica.status.not_in(TERMINAL_REPLICA_STATUSES))
        ).scalars()
    )


def read_nodes(*, session: Session) -> list[tuple[Node, int]]:
    """Every node with the number of live replicas on it."""
    counts: dict[str, int] = {}
    for replica in _live_replicas(session):
        counts[replica.node_id] = counts.get(replica.node_id, 0) + 1
    nodes = session.execute(sa.select(Node).order_by(Node.id)).scalars()
    return [(node, counts.get(node.id, 0)) for node in nodes]


def read_node_details(
    *, session: Session, project_id: int, node_id: str | None = None
) -> list[tuple[Node, list[Replica], list[str]]]:
    """Every node (or node `node_id` alone) with all its live replicas, and the names of
    those of `project_id`.

    The names ('job/attempt/index') are the caller's own only: other projects'
    jobs are not theirs to see, only counted.
    """
    by_node: dict[str, list[Replica]] = {}
    mine: dict[str, list[str]] = {}
    rows = session.execute(
        sa.select(Replica, Job.project_id)
        .join(Job, Job.id == Replica.job_id)
        .where(
            Replica.status.not_in(TERMINAL_REPLICA_STATUSES),
            sa.true() if node_id is None else Replica.node_id == node_id,
        )
        .order_by(Replica.job_id, Replica.attempt, Replica.index)
    ).all()
    for replica, owner in rows:
        by_node.setdefault(replica.node_id, []).append(replica)
        if owner == project_id:
            mine.setdefault(replica.node_id, []).append(
                f"{replica.job_id}/{replica.attempt}/{replica.index}"
            )
    chosen = sa.true() if node_id is None else Node.id == node_id
    nodes = session.execute(sa.select(Node).where(chosen).order_by(Node.id)).scalars()
    return [(node, by_node.get(node.id, []), mine.get(node.id, [])) for node in nodes]
