"""Quarantine: a node on which replicas fail for reasons of the node's, or straggle, too
often takes no new replicas (Node.cordon = QUARANTINE, with its reason) until an
operator lifts it (`cohort node undrain`: drains.undrain_node).

What counts, per node, within QUARANTINE_WINDOW and since its cordon was last lifted, once
per attempt of a job (a node lost takes every replica of a gang there at once: one
incident, not one per replica):

* a replica that failed in a way that says the node may be at fault: lost (its node
  stopped answering, or its agent no longer ran it or never started it), killed by a
  signal Cohort did not send (the OOM killer, an operator, a host going down), or out of
  space on DATA_DIR (services/exit_codes.py calls all of them retryable);
* a straggler named there (stragglers.py).

Not counted: a program's own error (exit 1 and the like) or a permanent failure (bad
command, segfault), which fails the same on any node; a replica's own request for a
retry (138) or its answer to "checkpoint now" (75); a replica Cohort stopped; a hung
replica (a deadlock of the program hangs it on any node).

Never more than QUARANTINE_MAX_SHARE of the live nodes are quarantined at once (half, by
default; a single node never): faults that strike most nodes alike are the cluster's or the
jobs' (a bad release, an outage), and quarantining every node for them would stop all work.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services import exit_codes
from services.models import Node, Replica, Straggler
from services.settings import Settings
from services.statuses import LIVE_NODE_STATUSES, NodeCordon, ReplicaStatus

# The partial index's condition, written out (a bound parameter would hide it from a
# generic plan, which then could not use the index).
FAILED_OR_LOST = sa.text("replicas.status IN ('failed', 'lost')")
# Retryable, but the replica's own doing: not the node's.
_OWN_EXITS = frozenset({exit_codes.CHECKPOINTED, exit_codes.TRAINER_RETRY})


def node_fault(status: ReplicaStatus, exit_code: int | None, failure: str) -> str | None:
    """What a failed replica's end says against its node, or None when it says nothing."""
    if status is ReplicaStatus.LOST or (exit_code is None and failure.startswith("lost")):
        return failure.split(":", 1)[0] if failure else "lost"
    if exit_code is None or exit_code in _OWN_EXITS:
        return None  # hung: the program's as much as the node's
    if exit_code == exit_codes.NO_SPACE:
        return exit_codes.NO_SPACE_REASON
    if exit_code > 128 and exit_codes.is_retryable(exit_code):
        return f"killed by signal {exit_code - 128}"
    return None


def quarantine_nodes(*, session: Session, settings: Settings, now: dt.datetime) -> list[Node]:
    """Quarantine every uncordoned node with QUARANTINE_FAILURES faults or more in the
    window; returns the nodes quarantined now. Reads only the window's failed replicas
    and stragglers (a partial index holds failed and lost replicas by their end), never
    every node."""
    if not settings.QUARANTINE_FAILURES:
        return []
    faults = _faults(session, now - dt.timedelta(seconds=settings.QUARANTINE_WINDOW))
    quarantined: list[Node] = []
    over = {
        node: found for node, found in faults.items() if len(found) >= settings.QUARANTINE_FAILURES
    }
    room = _room(session, settings) if over else 0  # counted only when a node is over
    for node_id, found in sorted(over.items()):
        if len(quarantined) >= room:
            break
        node = session.get(Node, node_id, with_for_update=True)
        if node is None or node.cordon is not None:
            continue
        node.cordon = NodeCordon.QUARANTINE
        node.cordoned_at = now
        node.cordon_reason = (
            f"quarantined: {len(found)} replicas failed or straggled here within "
            f"{settings.QUARANTINE_WINDOW:g} s ({'; '.join(sorted(found)[:5])})"
        )
        quarantined.append(node)
    session.flush()
    return quarantined


def _faults(session: Session, since: dt.datetime) -> dict[str, list[str]]:
    """Each node's faults since `since` (and since its cordon was last lifted): one per
    attempt of a job that failed there for the node's reasons, and each straggler."""
    faults: dict[str, list[str]] = {}
    failed = session.execute(
        sa.select(
            Replica.node_id,
            Replica.job_id,
            Replica.attempt,
            Replica.index,
            Replica.status,
            Replica.exit_code,
            Replica.failure,
        )
        .join(Node, Node.id == Replica.node_id)
        .where(
            FAILED_OR_LOST,
            Replica.finished_at >= since,
            *_counted(Replica.finished_at),
        )
    )
    incidents: dict[str, dict[tuple[int, int], str]] = {}
    for node_id, job_id, attempt, index, status, exit_code, failure in failed:
        fault = node_fault(status, exit_code, failure)
        if fault:  # the first replica of an attempt names the incident
            here = incidents.setdefault(node_id, {})
            here.setdefault((job_id, attempt), f"job {job_id} replica {index} {fault}")
    for node_id, here in incidents.items():
        faults[node_id] = list(here.values())
    stragglers = session.execute(
        sa.select(Straggler.node_id, Straggler.job_id, Straggler.replica)
        .join(Node, Node.id == Straggler.node_id)
        .where(Straggler.found_at >= since, *_counted(Straggler.found_at))
    )
    for node_id, job_id, index in stragglers:
        faults.setdefault(node_id, []).append(f"job {job_id} replica {index} straggled")
    return faults


def _room(session: Session, settings: Settings) -> int:
    """How many more nodes may be quarantined: QUARANTINE_MAX_SHARE of the live nodes, less
    those quarantined already."""
    live, held = session.execute(
        sa.select(
            sa.func.count(),
            sa.func.count().filter(Node.cordon == NodeCordon.QUARANTINE),
        ).where(Node.status.in_(LIVE_NODE_STATUSES))
    ).one()
    return int(live * settings.QUARANTINE_MAX_SHARE) - held


def _counted(at: Any) -> tuple[Any, ...]:
    """Conditions of a fault at `at` still counting against its (joined) node: the node is
    not cordoned, and the fault came after its cordon was last lifted."""
    return (
        Node.cordon.is_(None),
        sa.or_(Node.cordon_lifted_at.is_(None), at > Node.cordon_lifted_at),
    )
