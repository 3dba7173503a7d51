"""Messages the control plane sends to node agents, and the port that sends them.

Services decide *what* to send; workers/control/dispatch.py sends it through Celery.
Messages are only sent after the transaction that decided them has committed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class StartReplica:
    node_id: str
    payload: dict[str, Any] = field(hash=False)


@dataclass(frozen=True)
class StopReplica:
    node_id: str
    job_id: int
    attempt: int
    index: int
    grace_seconds: float = 10.0


@dataclass(frozen=True)
class CleanupJob:
    """Remove a finished job's scratch files (checkpoints, temp) on one node."""

    node_id: str
    job_id: int


Message = StartReplica | StopReplica | CleanupJob


class Dispatcher(Protocol):
    def send(self, messages: list[Message]) -> None:
        """Deliver messages to the agents' queues (best effort; the scheduler re-sends)."""
        ...
