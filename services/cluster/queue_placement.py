"""The queue placed: what fits is stored as gangs of pending replicas with their start
messages, the rest keeps a reason to show; starts lost on the way are sent again.

Part of the scheduling pass (services/scheduling/): it only reads and writes SQL and
returns the messages to send; the caller commits first and sends after (a message must
never announce uncommitted state).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.orm.util import identity_key

from services.cluster import placement_digest, tf_config
from services.cluster.fair_share import ProjectState
from services.cluster.node_capacity import read_capacity, read_pending
from services.cluster.placement import (
    UNSCHEDULABLE,
    GangRequest,
    ReplicaPlacement,
    pick_ports,
    place,
)
from services.cluster.placement_digest import PlacementMemo
from services.cluster.placement_roles import ps_parts
from services.db import read_rows
from services.jobs import quotas
from services.jobs.bulk_rows import insert_rows
from services.jobs.replica_specs import start_message, start_messages
from services.jobs.transitions import lock_jobs, transition_locked
from services.models import Job, Node, Replica
from services.settings import Settings
from services.statuses import LIVE_NODE_STATUSES, JobStatus, ReplicaStatus
from services.wire.replica import Message


@dataclass(slots=True)
class PlacedReplica:
    """A replica this pass places, as its row is inserted and its start message built:
    the gangs of a pass are stored in one batch, not as ORM objects one by one."""

    job_id: int
    attempt: int
    index: int
    node_id: str
    address: str
    port: int
    gpu_ids: str
    role: str
    role_index: int
    tf_config: dict[str, Any] | None

    def row(self, **more: Any) -> dict[str, Any]:
        """Its values as a row of `replicas`, with `more`."""
        return {
            "job_id": self.job_id,
            "attempt": self.attempt,
            "index": self.index,
            "node_id": self.node_id,
            "address": self.address,
            "port": self.port,
            "gpu_ids": self.gpu_ids,
            "role": self.role,
            "role_index": self.role_index,
            "tf_config": self.tf_config,
            **more,
        }


def resend_stale_starts(*, session: Session, settings: Settings, now: dt.datetime) -> list[Message]:
    # A start message lost between commit and send (crash, Redis restart) is
    # sent again; the agent ignores a start it has already acted on.
    cutoff = now - dt.timedelta(seconds=settings.START_RESEND_AFTER)
    rows = session.execute(
        sa.select(Replica, Job)
        .join(Job, Job.id == Replica.job_id)
        .join(Node, Node.id == Replica.node_id)
        .where(
            Replica.status == ReplicaStatus.PENDING,
            Replica.attempt == Job.attempt,
            Job.status == JobStatus.SCHEDULED,
            Replica.dispatched_at < cutoff,
            Node.status.in_(LIVE_NODE_STATUSES),
        )
    ).all()
    messages: list[Message] = []
    for replica, job in rows:
        replica.dispatched_at = now
        messages.append(start_message(job, replica))
    return messages


# What placement reads of each queued job: its shape, its place in the order, and the
# reason it shows (rewritten only when it changes). Not the whole row: the queue may be
# tens of thousands of jobs, read on every pass.
_QUEUE_COLUMNS = (
    Job.id,
    Job.replicas,
    Job.gpus_per_replica,
    Job.priority,
    Job.placement,
    Job.roles,
    Job.role_placement,
    Job.project_id,
    Job.not_before,
    Job.reason,
    Job.image,
)


def place_queue(
    *, session: Session, settings: Settings, now: dt.datetime, memo: PlacementMemo | None
) -> tuple[list[Message], list[int]]:
    """Place what fits of the queue, and store why the rest waits; the start messages
    and the jobs placed. With `memo`, a pass whose inputs are those the last committed
    pass left when it placed nothing does neither (placement_digest.py)."""
    digest = placement_digest.read_digest(session=session, now=now) if memo else None
    if memo is not None and digest is not None and digest == memo.idle:
        memo.pending = digest
        return [], []
    messages, placed, rewritten = _place_all(session, settings, now)
    if (
        memo is not None
        and digest is not None
        and not placed
        and not placement_digest.in_backoff(digest)
    ):
        # The reasons just written changed what the next pass will read.
        memo.pending = (
            placement_digest.read_digest(session=session, now=now) if rewritten else digest
        )
    return messages, placed


def _place_all(
    session: Session, settings: Settings, now: dt.datetime
) -> tuple[list[Message], list[int], bool]:
    """The queue read and placed: the start messages, the jobs placed, and whether any
    waiting job's reason was rewritten."""
    queued = read_rows(
        session, sa.select(*_QUEUE_COLUMNS).where(Job.status == JobStatus.QUEUED).order_by(Job.id)
    )
    reasons: dict[int, str] = {}
    requests = _requests(queued, settings, now, reasons)
    messages: list[Message] = []
    placed: list[int] = []
    if requests:
        capacity, used_ports = read_capacity(session=session)
        projects = _project_states(session, settings, {r.project for r in requests})
        result = place(requests, capacity, projects)
        reasons.update(_waiting_reasons(session, result.waiting, bool(capacity)))
        messages, placed = _schedule_gangs(session, settings, result.assignments, used_ports, now)
    before = {job_id: reason for job_id, *_, reason, _ in queued}
    changed = {job_id: reason for job_id, reason in reasons.items() if before[job_id] != reason}
    _store_reasons(session, changed)
    return messages, placed, bool(changed)


def _requests(
    queued: Sequence[Any], settings: Settings, now: dt.datetime, reasons: dict[int, str]
) -> list[GangRequest]:
    """The placer's request of each queued job out of its restart backoff; the reason of
    each job still in it into `reasons`."""
    requests = []
    policy = settings.PLACEMENT_POLICY
    # Each row unpacked once, its request built positionally: a row's attributes are
    # looked up by name and a NamedTuple's keywords matched, per job of a queue of tens
    # of thousands, on every pass that places.
    for row in queued:
        job_id, replicas, gpus, priority, how, roles, apart, project, not_before, _, image = row
        # A restarted gang waits out its backoff before it may be placed again.
        if not_before is not None and not_before > now:
            wait = (not_before - now).total_seconds()
            reasons[job_id] = f"restart backoff: placed again in {wait:.0f}s"
            continue
        parts = ps_parts(roles, apart) if roles else ()
        requests.append(
            GangRequest(
                job_id, replicas, gpus, priority, job_id, how or policy, project, parts,
                image is not None,
            )
        )  # fmt: skip
    return requests


def _no_node_reason(session: Session) -> str:
    """Why no node is offered: none registered, or every live one cordoned."""
    cordoned = session.execute(
        sa.select(sa.func.count()).where(
            Node.status.in_(LIVE_NODE_STATUSES), Node.cordon.is_not(None)
        )
    ).scalar_one()
    if cordoned:
        return (
            f"every node is drained or quarantined ({cordoned}): waiting for one to be "
            "undrained (`cohort node list` says why)"
        )
    return "waiting for a node agent to register"


def _waiting_reasons(session: Session, waiting: dict[int, str], any_ready: bool) -> dict[int, str]:
    """What each waiting job shows. A node whose GPU inventory is pending may be what a
    job needs (its GPUs are not known yet): no job is unschedulable while one is."""
    unfit = {job_id for job_id, why in waiting.items() if why.startswith(UNSCHEDULABLE)}
    pending = read_pending(session=session) if unfit or not any_ready else []
    if not any_ready:
        if not pending:
            return dict.fromkeys(waiting, _no_node_reason(session))
        unfit = set(waiting)
    if not pending:
        return waiting
    names = ", ".join(pending[:3]) + (f" and {len(pending) - 3} more" if len(pending) > 3 else "")
    note = f"inventory pending on node{'s' if len(pending) > 1 else ''} {names}"
    return {
        job_id: f"{note}: {_so_far(why)}" if job_id in unfit else why
        for job_id, why in waiting.items()
    }


def _so_far(reason: str) -> str:
    # The placer counted the ready nodes only.
    return reason.removeprefix(UNSCHEDULABLE).replace("the cluster has", "the ready nodes have")


def _store_reasons(session: Session, reasons: dict[int, str]) -> None:
    """Write the waiting jobs' new reasons in one batch (only those that changed).

    A job the api cancelled since the queue was read keeps its own reason: the update
    applies to jobs still queued only.
    """
    if not reasons:
        return
    table = cast(sa.Table, Job.__table__)  # a mapped class's table is a Table
    session.execute(
        sa.update(table)
        .where(table.c.id == sa.bindparam("job_id"), table.c.status == JobStatus.QUEUED)
        .values(reason=sa.bindparam("new_reason")),
        [{"job_id": job_id, "new_reason": reason} for job_id, reason in reasons.items()],
    )
    # Jobs this session already holds (a caller's, or settled in this pass) show it too.
    for job_id, reason in reasons.items():
        job = session.identity_map.get(identity_key(Job, job_id))
        if isinstance(job, Job) and job.status is JobStatus.QUEUED:
            set_committed_value(job, "reason", reason)


def _project_states(
    session: Session, settings: Settings, waiting: set[int]
) -> dict[int, ProjectState]:
    """What every project holds now (fair sharing weighs them all), and the running
    quotas of those with jobs queued (`waiting`)."""
    running = quotas.read_running(session=session)
    limits = quotas.read_many_limits(session=session, project_ids=waiting, settings=settings)
    states: dict[int, ProjectState] = {}
    for pid in waiting | set(running):
        held = running.get(pid, quotas.Running())
        limit = limits.get(pid)
        states[pid] = ProjectState(
            replicas=held.replicas,
            cpu_slots=held.cpu_slots,
            gpus=held.gpus,
            max_replicas=limit.max_running_replicas if limit else None,
            max_gpus=limit.max_gpus if limit else None,
        )
    return states


def _gang_ports(
    placements: Sequence[ReplicaPlacement], used_ports: dict[str, set[int]], settings: Settings
) -> dict[int, int]:
    """A free port for each replica (by index) on its node; `used_ports` takes them."""
    ports: dict[int, int] = {}
    for node_id in {p.node_id for p in placements}:
        indices = [i for i, p in enumerate(placements) if p.node_id == node_id]
        chosen = pick_ports(
            used_ports.setdefault(node_id, set()),
            len(indices),
            settings.PORT_RANGE_START,
            settings.PORT_RANGE_END,
        )
        used_ports[node_id].update(chosen)
        ports.update(zip(indices, chosen, strict=True))
    return ports


def _schedule_gangs(
    session: Session,
    settings: Settings,
    assignments: dict[int, list[ReplicaPlacement]],
    used_ports: dict[str, set[int]],
    now: dt.datetime,
) -> tuple[list[Message], list[int]]:
    """Store the placed gangs' replicas and move their jobs to scheduled, all in one
    batch; their start messages, and the jobs placed."""
    # Locked and read whole (their start messages need every field) in one statement.
    # A job the api cancelled since the queue was read is left out: the capacity the
    # placer gave it stays free until the next pass.
    locked = lock_jobs(session=session, job_ids=list(assignments))
    jobs = [
        locked[job_id]
        for job_id in assignments
        if job_id in locked and locked[job_id].status is JobStatus.QUEUED
    ]
    messages: list[Message] = []
    reasons: dict[int, str] = {}
    rows: list[dict[str, Any]] = []
    for job in jobs:
        placements = assignments[job.id]
        ports = _gang_ports(placements, used_ports, settings)
        addresses = [f"{p.address}:{ports[i]}" for i, p in enumerate(placements)]
        slots = tf_config.gang_roles(job.strategy, job.replicas, job.roles)
        gang = [
            PlacedReplica(
                job_id=job.id,
                attempt=job.attempt,
                index=index,
                node_id=placement.node_id,
                address=addresses[index],
                port=ports[index],
                gpu_ids=",".join(str(g) for g in placement.gpu_ids),
                role=slots[index][0],
                role_index=slots[index][1],
                tf_config=tf_config.compose(job.strategy, slots, addresses, index),
            )
            for index, placement in enumerate(placements)
        ]
        # created_at is the placement's time (watchdog.settle_unanswered_starts).
        rows += [
            r.row(status=ReplicaStatus.PENDING, dispatched_at=now, created_at=now) for r in gang
        ]
        messages += start_messages(job, gang)
        nodes_used = sorted({p.node_id for p in placements})
        reasons[job.id] = f"placed {job.replicas} replicas on {', '.join(nodes_used)}"
    # Plain rows in one statement (bulk_rows.py): ORM objects flushed as one multi-row
    # INSERT ... RETURNING cost the client more than the rest of the pass's writes.
    insert_rows(session, cast(sa.Table, Replica.__table__), rows)
    transition_locked(session=session, jobs=jobs, target=JobStatus.SCHEDULED, reasons=reasons)
    return messages, [job.id for job in jobs]
