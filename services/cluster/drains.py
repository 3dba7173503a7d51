"""Drains: a node drained by an operator (`cohort node drain`) or by its own agent (on
SIGTERM: a host shutdown, a spot notice) takes no new replicas, and every gang with a live
replica there moves elsewhere, resuming from a checkpoint made for the purpose.

* `drain_node` / `undrain_node`: the node's cordon (services/statuses.py NodeCordon);
  placement offers no cordoned node (node_capacity.PLACEABLE_NODE).
* `advance_drains`, a step of the scheduling pass: a running gang with a live replica on
  a drained node is asked to checkpoint now: a `CheckpointReplica` to the agent of each
  of its replicas (SIGUSR1 there: workers/node/checkpoint_now.py), each replica's
  `checkpoint_requested_at` set. Once every replica has exited (75, CHECKPOINTED, the
  answer), or DRAIN_GRACE after the request, the gang is torn down as a move: the job
  restarts at once, through the restart path of every broken gang (RESTARTING, the
  queue, a new attempt placed on nodes not cordoned, which restores the checkpoint), and
  the attempt counts in `moved_attempts`, not against max_restarts. A gang still being
  placed (nothing trained yet) moves at once.

While a drain waits on a gang, a replica's exit does not tear it down
(gang_outcome.draining, in gangs.settle_job): its peers are saving their checkpoints.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services import exit_codes
from services.cluster import gang_outcome, gangs
from services.exceptions import NodeNotFound
from services.jobs.transitions import note_job, transition_job
from services.models import Job, Node, Replica
from services.settings import Settings
from services.statuses import TERMINAL_REPLICA_STATUSES, JobStatus, NodeCordon
from services.wire.replica import CheckpointReplica, Message


def drain_node(*, session: Session, node_id: str, reason: str, at: dt.datetime) -> Node:
    """Drain node `node_id` (idempotent: a node drained already keeps its first reason
    and time; a quarantined one becomes drained, which also moves its gangs).

    Raises:
        NodeNotFound: no node of that id has ever registered.
    """
    node = session.get(Node, node_id, with_for_update=True)
    if node is None:
        raise NodeNotFound(node_id)
    if node.cordon is not NodeCordon.DRAIN:
        node.cordon = NodeCordon.DRAIN
        node.cordon_reason = reason
        node.cordoned_at = at
        session.flush()
    return node


def undrain_node(*, session: Session, node_id: str, at: dt.datetime) -> Node:
    """Lift any cordon of node `node_id` (drain or quarantine): it takes replicas again,
    and the faults seen there before `at` no longer count towards quarantining it
    (quarantine.py). Gangs already moved off it stay where they are.

    Raises:
        NodeNotFound: no node of that id has ever registered.
    """
    node = session.get(Node, node_id, with_for_update=True)
    if node is None:
        raise NodeNotFound(node_id)
    node.cordon, node.cordon_reason, node.cordoned_at = None, "", None
    node.cordon_lifted_at = at
    session.flush()
    return node


def _live(replica: Replica) -> bool:
    return replica.status not in TERMINAL_REPLICA_STATUSES


def _jobs_to_drain(session: Session, drained: set[str]) -> list[Job]:
    """Placed or running jobs whose current gang has a live replica on a drained node, or
    was asked to checkpoint (few: none on most passes, found through two indexed tests)."""
    mine = sa.and_(Replica.job_id == Job.id, Replica.attempt == Job.attempt)
    asked = sa.exists().where(mine, Replica.checkpoint_requested_at.is_not(None))
    there = sa.exists().where(
        mine, Replica.node_id.in_(sorted(drained)), Replica.status.not_in(TERMINAL_REPLICA_STATUSES)
    )
    touched = sa.or_(asked, there) if drained else asked
    return list(
        session.execute(
            sa.select(Job)
            .where(Job.status.in_((JobStatus.SCHEDULED, JobStatus.RUNNING)), touched)
            .order_by(Job.id)
        ).scalars()
    )


def advance_drains(*, session: Session, settings: Settings, now: dt.datetime) -> list[Message]:
    """Ask the gangs on drained nodes to checkpoint now, and move those that have (or whose
    grace ran out); returns the checkpoint and stop messages to send."""
    drained = set(
        session.execute(sa.select(Node.id).where(Node.cordon == NodeCordon.DRAIN)).scalars()
    )
    jobs = _jobs_to_drain(session, drained)
    if not jobs:
        return []
    replicas = gangs.replicas_of(session=session, job_ids=[job.id for job in jobs])
    grace = dt.timedelta(seconds=settings.DRAIN_GRACE)
    messages: list[Message] = []
    for job in jobs:
        current = [r for r in replicas.get(job.id, []) if r.attempt == job.attempt]
        there = sorted({r.node_id for r in current if _live(r) and r.node_id in drained})
        asked = [r.checkpoint_requested_at for r in current if r.checkpoint_requested_at]
        if not asked:
            if job.status is JobStatus.SCHEDULED:  # its gang never formed: nothing to save
                messages += _move(session, job, current, there, now, "before its gang started")
            else:
                messages += _ask(session, job, current, there, settings, now)
            continue
        live = [r for r in current if _live(r)]
        if not live and gang_outcome.success(job, current, now)[0] is not None:
            continue  # it finished meanwhile: gangs.settle_job records the success
        if live and now - min(asked) < grace:
            continue  # its replicas are saving
        on_drained = sorted({r.node_id for r in current if r.node_id in drained})
        messages += _move(session, job, current, on_drained, now, _how(current, live, settings))
    return messages


def _names(nodes: list[str]) -> str:
    if not nodes:
        return "a node since undrained"
    return ("node " if len(nodes) == 1 else "nodes ") + ", ".join(nodes)


def _ask(
    session: Session,
    job: Job,
    current: list[Replica],
    there: list[str],
    settings: Settings,
    now: dt.datetime,
) -> list[Message]:
    """Ask every live replica of the gang to checkpoint now (all of them: a `command`
    job's replicas each answer for themselves), and say so in the job's events."""
    live = [r for r in current if _live(r)]
    for replica in live:
        replica.checkpoint_requested_at = now
    session.flush()
    note_job(
        session=session,
        job_id=job.id,
        attempt=job.attempt,
        reason=f"{_names(there)} drained: asked its {len(live)} replicas to checkpoint now "
        f"(SIGUSR1); the gang moves once they have exited, or in "
        f"{settings.DRAIN_GRACE:.0f}s",
        at=now,  # the instant the grace counts from (checkpoint_requested_at)
    )
    return [CheckpointReplica(r.node_id, r.job_id, r.attempt, r.index) for r in live]


def _how(current: list[Replica], live: list[Replica], settings: Settings) -> str:
    """What the gang did with the request, for the job's events."""
    saved = sum(1 for r in current if r.exit_code == exit_codes.CHECKPOINTED)
    if saved == len(current):
        return (
            "its replica checkpointed (exit 75)"
            if saved == 1
            else (f"all {saved} replicas checkpointed (exit 75)")
        )
    if live:
        return (
            f"{saved} of {len(current)} replicas checkpointed; the grace of "
            f"{settings.DRAIN_GRACE:.0f}s ran out and the other {len(live)} were stopped"
        )
    others = ", ".join(
        f"replica {r.index} {exit_codes.describe(r.exit_code, r.log_tail)}"
        if r.exit_code is not None
        else f"replica {r.index} {r.failure or r.status}"
        for r in current
        if r.exit_code != exit_codes.CHECKPOINTED
    )
    return f"{saved} of {len(current)} replicas checkpointed ({others})"


def _move(
    session: Session,
    job: Job,
    current: list[Replica],
    nodes: list[str],
    now: dt.datetime,
    how: str,
) -> list[Message]:
    """Tear the gang down as a move: restart at once, not counted as a restart."""
    job.moved_attempts += 1
    job.not_before = now + dt.timedelta(seconds=gang_outcome.restart_delay(job, current, 0.0))
    transition_job(
        session=session,
        job_id=job.id,
        target=JobStatus.RESTARTING,
        reason=f"drained from {_names(nodes)}: {how}; attempt {job.attempt + 1} resumes "
        "from its checkpoint on other nodes (a move, not counted as a restart)",
    )
    return gangs.stop_replicas(current, now)
