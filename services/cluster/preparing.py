"""What a placed replica's agent is doing before its start, as it says
(services/wire/events.py ReplicaPreparing): kept on the pending replica for the job
view, and recorded as an event of its job (the events list and the job's live stream)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from services.cluster.gangs import find_replica
from services.jobs.transitions import note_job
from services.statuses import ReplicaStatus


def record_replica_preparing(
    *, session: Session, job_id: int, attempt: int, index: int, node_id: str, note: str
) -> bool:
    """Replica (job, attempt, index), pending on `node_id`, is being prepared: `note`.
    Nothing for a replica no longer pending (a late report); whether it was recorded."""
    replica = find_replica(session, job_id, attempt, index)
    if replica is None or replica.status is not ReplicaStatus.PENDING:
        return False
    if not note_job(
        session=session,
        job_id=job_id,
        attempt=attempt,
        reason=f"replica {index} on {node_id} preparing: {note}",
    ):
        return False
    replica.preparing = note
    session.flush()
    return True
