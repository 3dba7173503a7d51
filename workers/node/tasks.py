"""Celery tasks run by a node agent. Each is short: it starts or stops a process and returns.

The replica's process is supervised by the agent, not by the task, so no task
ever lasts as long as a training run (a Redis broker would redeliver it). Each task
takes one message encoded by services/wire/replica.py and sealed by the control plane
(services/wire/signing.py); workers/node/inbox.py opens it, or refuses it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ParamSpec, TypeVar

from services.wire.replica import (
    CHECKPOINT_TASK,
    CLEANUP_TASK,
    START_TASK,
    STOP_TASK,
    CheckpointReplica,
    CleanupJob,
    StartReplica,
    StopReplica,
)
from workers.celery_app import app
from workers.node import checkpoint_now
from workers.node.agent import Agent
from workers.node.agent_process import current_agent
from workers.node.inbox import M, open_message

P = ParamSpec("P")
R = TypeVar("R")


def _task(name: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Celery's `app.task(name=...)`, typed: Celery ships no types, and the task it makes
    is called as the function is."""
    decorator: Callable[[Callable[P, R]], Callable[P, R]] = app.task(name=name)
    return decorator


def _opened(raw: str, kind: type[M]) -> tuple[Agent, M | None]:
    agent = current_agent()
    return agent, open_message(
        raw,
        kind,
        node_id=agent.node_id,
        node_key=agent.node_key,
        max_age=agent.settings.MESSAGE_MAX_AGE,
        now=agent.clock.now(),
    )


@_task(START_TASK)
def start_replica(message: str) -> None:
    """Start replica (job, attempt, index) on this node, unless it was started already."""
    agent, start = _opened(message, StartReplica)
    if start is not None:
        agent.start_replica(start)


@_task(STOP_TASK)
def stop_replica(message: str) -> None:
    """Stop replica (job, attempt, index): SIGTERM to its process group, SIGKILL after grace."""
    agent, stop = _opened(message, StopReplica)
    if stop is not None:
        agent.stop_replica(stop)


@_task(CLEANUP_TASK)
def cleanup_job(message: str) -> None:
    """Remove a finished job's scratch files on this node (checkpoints, temp)."""
    agent, cleanup = _opened(message, CleanupJob)
    if cleanup is not None:
        agent.cleanup_job(cleanup)


@_task(CHECKPOINT_TASK)
def checkpoint_replica(message: str) -> None:
    """Ask replica (job, attempt, index) to checkpoint now: SIGUSR1 to its process group."""
    agent, checkpoint = _opened(message, CheckpointReplica)
    if checkpoint is not None:
        checkpoint_now.ask(agent, checkpoint)
