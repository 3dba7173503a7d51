"""One scheduling pass: register heartbeats, reap lost nodes, settle gangs, place the queue.

The pass only reads and writes SQL and returns the messages to send; the caller
commits first and sends after (a message must never announce uncommitted state).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.cluster import gangs, nodes, tf_config, watchdog
from services.cluster.fair_share import ProjectState
from services.cluster.pass_lock import lock_pass
from services.cluster.placement import GangRequest, ReplicaPlacement, pick_ports, place
from services.cluster.placement_roles import ps_parts
from services.jobs import quotas
from services.jobs.inputs import resolve_inputs
from services.jobs.transitions import transition_job
from services.models import Job, Node, Replica, utcnow
from services.retraining import firing, promotion
from services.settings import Settings
from services.statuses import JobStatus, NodeStatus, ReplicaStatus
from services.sweeps.advance import advance_sweeps
from services.wire.replica import (
    Distribution,
    Message,
    Profile,
    ReplicaSpec,
    Role,
    StartReplica,
    Strategy,
)

START_RESEND_SECONDS = 20.0


@dataclass
class PassResult:
    messages: list[Message] = field(default_factory=list)
    placed: list[int] = field(default_factory=list)
    lost_nodes: list[str] = field(default_factory=list)


def _profile(job: Job, index: int) -> Profile | None:
    """The job's profile range, on the replicas it names (default: the chief)."""
    if not job.profile or index not in job.profile.get("replicas", [0]):
        return None
    first, last = job.profile["steps"]
    return Profile(first_step=first, last_step=last)


def start_message(job: Job, replica: Replica) -> StartReplica:
    """Everything an agent needs to start one replica (agents cannot read SQL)."""
    spec = ReplicaSpec(job_id=job.id, attempt=replica.attempt, index=replica.index,
                       replicas=job.replicas, trainer=job.trainer,
                       # Stored from a JobCreate; the spec checks it again as it is built.
                       strategy=cast(Strategy, job.strategy),
                       hyperparameters=job.hyperparameters, bundle=job.bundle,
                       command=job.command, env=dict(job.env or {}),
                       inputs=resolve_inputs(job),
                       progress_timeout_seconds=job.progress_timeout_seconds,
                       role=cast(Role, replica.role), role_index=replica.role_index,
                       distribution=Distribution(**(job.distribution or {})),
                       profile=_profile(job, replica.index))
    return StartReplica(replica.node_id, spec, tf_config=replica.tf_config, port=replica.port,
                        gpu_ids=replica.gpu_ids)


def _resend_stale_starts(session: Session, now: dt.datetime) -> list[Message]:
    # A start message lost between commit and send (crash, Redis restart) is
    # sent again; the agent ignores a start it has already acted on.
    cutoff = now - dt.timedelta(seconds=START_RESEND_SECONDS)
    rows = session.execute(
        sa.select(Replica, Job).join(Job, Job.id == Replica.job_id).join(
            Node, Node.id == Replica.node_id)
        .where(Replica.status == ReplicaStatus.PENDING, Replica.attempt == Job.attempt,
               Job.status == JobStatus.SCHEDULED, Replica.dispatched_at < cutoff,
               Node.status == NodeStatus.READY)
    ).all()
    messages: list[Message] = []
    for replica, job in rows:
        replica.dispatched_at = now
        messages.append(start_message(job, replica))
    return messages


def _place_queue(session: Session, settings: Settings, now: dt.datetime) -> tuple[
        list[Message], list[int]]:
    queued = list(session.execute(
        sa.select(Job).where(Job.status == JobStatus.QUEUED).order_by(Job.id)
    ).scalars())
    # A restarted gang waits out its backoff before it may be placed again.
    for job in queued:
        if job.not_before is not None and job.not_before > now:
            job.reason = f"restart backoff: placed again in " \
                         f"{(job.not_before - now).total_seconds():.0f}s"
    queued = [job for job in queued if job.not_before is None or job.not_before <= now]
    if not queued:
        return [], []
    capacity, used_ports = nodes.read_capacity(session=session)
    requests = [GangRequest(job.id, job.replicas, job.gpus_per_replica, job.priority, job.id,
                            policy=job.placement or settings.PLACEMENT_POLICY,
                            parts=ps_parts(job.roles, job.role_placement) if job.roles else (),
                            project=job.project_id)
                for job in queued]
    result = place(requests, capacity, _project_states(session, settings, queued))
    by_id = {job.id: job for job in queued}
    for job_id, reason in result.waiting.items():
        if not capacity:
            reason = "waiting for a node agent to register"
        by_id[job_id].reason = reason
    messages: list[Message] = []
    for job_id, placements in result.assignments.items():
        ports = _gang_ports(placements, used_ports, settings)
        messages.extend(_schedule_gang(session, by_id[job_id], placements, ports, now))
    session.flush()
    return messages, list(result.assignments)


def _project_states(session: Session, settings: Settings, queued: list[Job]
                    ) -> dict[int, ProjectState]:
    """What every project holds now (fair sharing weighs them all), and the running
    quotas of those with jobs queued."""
    running = quotas.read_running(session=session)
    waiting = {job.project_id for job in queued}
    limits = quotas.read_many_limits(session=session, project_ids=waiting, settings=settings)
    states: dict[int, ProjectState] = {}
    for pid in waiting | set(running):
        held = running.get(pid, quotas.Running())
        limit = limits.get(pid)
        states[pid] = ProjectState(
            replicas=held.replicas, cpu_slots=held.cpu_slots, gpus=held.gpus,
            max_replicas=limit.max_running_replicas if limit else None,
            max_gpus=limit.max_gpus if limit else None)
    return states


def _gang_ports(placements: Sequence[ReplicaPlacement], used_ports: dict[str, set[int]],
                settings: Settings) -> dict[int, int]:
    """A free port for each replica (by index) on its node; `used_ports` takes them."""
    ports: dict[int, int] = {}
    for node_id in {p.node_id for p in placements}:
        indices = [i for i, p in enumerate(placements) if p.node_id == node_id]
        chosen = pick_ports(used_ports.setdefault(node_id, set()), len(indices),
                            settings.PORT_RANGE_START, settings.PORT_RANGE_END)
        used_ports[node_id].update(chosen)
        ports.update(zip(indices, chosen, strict=True))
    return ports


def _schedule_gang(session: Session, job: Job, placements: Sequence[ReplicaPlacement],
                   ports: dict[int, int], now: dt.datetime) -> list[Message]:
    """Store the placed gang's replicas, move the job to scheduled; their start messages."""
    addresses = [f"{p.address}:{ports[i]}" for i, p in enumerate(placements)]
    slots = tf_config.gang_roles(job.strategy, job.replicas, job.roles)
    replicas = []
    for index, placement in enumerate(placements):
        role, role_index = slots[index]
        replica = Replica(
            job_id=job.id, attempt=job.attempt, index=index, node_id=placement.node_id,
            address=addresses[index], port=ports[index],
            gpu_ids=",".join(str(g) for g in placement.gpu_ids),
            role=role, role_index=role_index,
            tf_config=tf_config.compose(job.strategy, slots, addresses, index),
            status=ReplicaStatus.PENDING, dispatched_at=now,
        )
        session.add(replica)
        replicas.append(replica)
    nodes_used = sorted({p.node_id for p in placements})
    transition_job(session=session, job_id=job.id, target=JobStatus.SCHEDULED,
                   reason=f"placed {job.replicas} replicas on {', '.join(nodes_used)}")
    return [start_message(job, r) for r in replicas]


def run_pass(
    *, session: Session, settings: Settings, heartbeats: list[nodes.Heartbeat],
    progress: dict[tuple[int, int, int], float] | None = None,
    now: dt.datetime | None = None,
) -> PassResult:
    """One full pass; the caller commits, then sends `result.messages`.

    Args:
        heartbeats: the last heartbeat of every agent.
        progress: the last progress heartbeat (unix time) of each running replica,
            keyed by (job, attempt, index).
    """
    lock_pass(session=session)  # before reading anything the pass decides on
    now = now or utcnow()
    result = PassResult()
    for beat in heartbeats:
        nodes.record_heartbeat(session=session, beat=beat)
    result.lost_nodes = watchdog.reap_lost_nodes(session=session, settings=settings, now=now)
    watchdog.reconcile_heartbeats(session=session, heartbeats=heartbeats)
    watchdog.note_progress(session=session, progress=progress or {})
    watchdog.find_hung(session=session, settings=settings, now=now)
    watchdog.enforce_deadlines(session=session, now=now)
    # Cron schedules fire before settling, so a `replace` cancel is acted on in this pass.
    firing.fire_due_schedules(session=session, settings=settings, now=now)
    promotion.decide_pending(session=session, now=now)
    for job in gangs.jobs_to_settle(session=session):
        result.messages.extend(gangs.settle_job(session=session, job=job, now=now))
    # After settling (a trial that just ended frees its sweep's turn), before placing
    # (a trial created now is placed in this pass).
    advance_sweeps(session=session, settings=settings, now=now)
    result.messages.extend(_resend_stale_starts(session, now))
    result.messages.extend(watchdog.clean_up_finished(session=session, now=now))
    placed_messages, result.placed = _place_queue(session, settings, now)
    result.messages.extend(placed_messages)
    return result

