"""Agent events (a replica started, exited or restarted in place) checked and applied to
SQL, each in its own fenced transaction, for the leader's event loop.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from services.cluster import drains, gangs
from services.cluster.fencing import Fence
from services.cluster.preparing import record_replica_preparing
from services.models import Job, utcnow
from services.wire.events import (
    Event,
    NodeDraining,
    ReplicaExited,
    ReplicaPreparing,
    ReplicaRestarted,
    ReplicaStarted,
    Wake,
    decode_event,
)
from services.wire.replica import Message
from services.wire.signing import Keyring, Refused, verify_event


def trusted_event(fields: dict[str, str], keyring: Keyring) -> Event:
    """The event in a stream entry, if the node it names signed it (a `wake` needs no
    signature: it only asks for a pass).

    Raises:
        WireError: malformed.
        Refused: a node's event without its node's signature.
    """
    event = decode_event(fields)
    if not isinstance(event, Wake):  # every other kind, present or future: a node's
        node_id = str(getattr(event, "node_id", ""))
        verify_event(keyring.node(node_id), node_id, fields)
    return event


def _from_its_node(
    session: Session, event: ReplicaStarted | ReplicaExited | ReplicaRestarted | ReplicaPreparing
) -> None:
    """Refuse a report about a replica from any node but the one SQL placed it on (a
    node's key proves who sent it, not that the replica is its own)."""
    runs_on = gangs.replica_node(
        session=session, job_id=event.job_id, attempt=event.attempt, index=event.index
    )
    if runs_on is not None and runs_on != event.node_id:
        raise Refused(
            "another node",
            f"{event.KIND} of replica {event.job_id}/"
            f"{event.attempt}/{event.index} from node {event.node_id!r}, "
            f"which runs on {runs_on!r}",
        )


def apply_event(event: Event, fence: Fence) -> list[Message]:
    """Apply one agent event in its own transaction, fenced; returns the messages it
    calls for.

    Raises:
        Refused: the event is about a replica that another node runs.
        Fenced: a newer leader took over; nothing was written.
    """
    if isinstance(event, NodeDraining):
        # Signed with that node's key (trusted_event): a node drains only itself.
        with fence.scope() as session:
            drains.drain_node(
                session=session,
                node_id=event.node_id,
                reason=f"its agent is draining it: {event.reason}",
                at=utcnow(),
            )
        return []  # the pass this event wakes asks its gangs to checkpoint
    if isinstance(event, ReplicaPreparing | ReplicaRestarted):
        with fence.scope() as session:
            _from_its_node(session, event)
            _apply_without_settling(session, event)
        return []  # the replica stays pending, or runs on: nothing to settle
    if not isinstance(event, ReplicaStarted | ReplicaExited):
        return []  # a `wake` only triggers a pass
    # Timed by the control plane's clock as it applies the event, not by `event.ts` (the
    # agent's): the start-up timeout counts from here (services/cluster/arrivals.py).
    at = utcnow()
    with fence.scope() as session:
        _from_its_node(session, event)
        if isinstance(event, ReplicaStarted):
            replica = gangs.record_replica_started(
                session=session,
                job_id=event.job_id,
                attempt=event.attempt,
                index=event.index,
                pid=event.pid,
                at=at,
            )
        else:
            replica = gangs.record_replica_exited(
                session=session,
                job_id=event.job_id,
                attempt=event.attempt,
                index=event.index,
                exit_code=event.exit_code,
                log_tail=event.log_tail,
                at=at,
            )
        if replica is None:
            return []
        job = session.get(Job, event.job_id)
        return gangs.settle_job(session=session, job=job) if job else []


def _apply_without_settling(session: Session, event: ReplicaPreparing | ReplicaRestarted) -> None:
    """An event that changes no replica's status: a pending replica being prepared (what
    for), a parameter_server worker started again in place (it stays running)."""
    if isinstance(event, ReplicaPreparing):
        record_replica_preparing(
            session=session,
            job_id=event.job_id,
            attempt=event.attempt,
            index=event.index,
            node_id=event.node_id,
            note=event.note,
        )
        return
    gangs.record_replica_restarted(
        session=session,
        job_id=event.job_id,
        attempt=event.attempt,
        index=event.index,
        pid=event.pid,
        restarts=event.restarts,
    )
