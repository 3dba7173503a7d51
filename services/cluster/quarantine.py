"""Quarantine: a node on which replicas fail for reasons of the node's, or straggle, too
often takes no new replicas (Node.cordon = QUARANTINE, with its reason) until an
operator lifts it (`cohort node undrain`, `lift_cordon`).

What counts, per node, within QUARANTINE_WINDOW and since its cordon was last lifted:

* a replica that failed in a way that says the node may be at fault: lost (its node
  stopped answering, or its agent no longer ran it or never started it), killed by a
  signal Cohort did not send (the OOM killer, an operator, a host going down), or out of
  space on DATA_DIR (services/exit_codes.py calls all of them retryable);
* a straggler named there (stragglers.py).

Not counted: a program's own error (exit 1 and the like) or a permanent failure (bad
command, segfault), which fails the same on any node; a replica's own request for a
retry (138) or its answer to "checkpoint now" (75); a replica Cohort stopped; a hung
replica (a deadlock of the program hangs it on any node).
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services import exit_codes
from services.models import Node, Replica, Straggler
from services.settings import Settings
from services.statuses import NodeCordon, ReplicaStatus

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
    window; returns the nodes quarantined now."""
    if not settings.QUARANTINE_FAILURES:
        return []
    since = now - dt.timedelta(seconds=settings.QUARANTINE_WINDOW)
    nodes = {
        node.id: node
        for node in session.execute(sa.select(Node).where(Node.cordon.is_(None))).scalars()
    }
    faults: dict[str, list[str]] = {node_id: [] for node_id in nodes}
    failed = session.execute(
        sa.select(
            Replica.node_id,
            Replica.job_id,
            Replica.index,
            Replica.status,
            Replica.exit_code,
            Replica.failure,
            Replica.finished_at,
        ).where(
            Replica.node_id.in_(list(nodes)),
            Replica.status.in_([ReplicaStatus.FAILED, ReplicaStatus.LOST]),
            Replica.finished_at >= since,
        )
    )
    for node_id, job_id, index, status, exit_code, failure, finished_at in failed:
        fault = node_fault(status, exit_code, failure)
        if fault and _counts(nodes[node_id], finished_at):
            faults[node_id].append(f"job {job_id} replica {index} {fault}")
    stragglers = session.execute(
        sa.select(Straggler.node_id, Straggler.job_id, Straggler.replica, Straggler.found_at).where(
            Straggler.node_id.in_(list(nodes)), Straggler.found_at >= since
        )
    )
    for node_id, job_id, index, found_at in stragglers:
        if _counts(nodes[node_id], found_at):
            faults[node_id].append(f"job {job_id} replica {index} straggled")
    quarantined = []
    for node_id, found in sorted(faults.items()):
        if len(found) >= settings.QUARANTINE_FAILURES:
            node = nodes[node_id]
            node.cordon = NodeCordon.QUARANTINE
            node.cordoned_at = now
            node.cordon_reason = (
                f"quarantined: {len(found)} replicas failed or straggled here within "
                f"{settings.QUARANTINE_WINDOW:g} s ({'; '.join(sorted(found)[:5])})"
            )
            quarantined.append(node)
    session.flush()
    return quarantined


def _counts(node: Node, at: dt.datetime | None) -> bool:
    """Whether a fault at `at` still counts: after the node's cordon was last lifted."""
    return at is not None and (node.cordon_lifted_at is None or at > node.cordon_lifted_at)


def lift_cordon(*, session: Session, node_id: str, now: dt.datetime) -> Node | None:
    """Lift a node's cordon (drain or quarantine): it takes replicas again, and the faults
    seen there so far no longer count towards quarantining it. None: no such node."""
    node = session.get(Node, node_id, with_for_update=True)
    if node is None:
        return None
    node.cordon = None
    node.cordon_reason = ""
    node.cordoned_at = None
    node.cordon_lifted_at = now
    session.flush()
    return node
