"""Celery tasks run by a node agent. Each is short: it starts or stops a process and returns.

The replica's process is supervised by the agent, not by the task, so no task
ever lasts as long as a training run (a Redis broker would redeliver it). Each task
takes one message encoded by services/wire/replica.py and decodes it here.
"""

from __future__ import annotations

from services.wire.replica import (
    CLEANUP_TASK,
    START_TASK,
    STOP_TASK,
    CleanupJob,
    StartReplica,
    StopReplica,
)
from workers.celery_app import app
from workers.node.agent import current_agent


@app.task(name=START_TASK)
def start_replica(message: str) -> None:
    """Start replica (job, attempt, index) on this node, unless it was started already."""
    current_agent().start_replica(StartReplica.decode(message))


@app.task(name=STOP_TASK)
def stop_replica(message: str) -> None:
    """Stop replica (job, attempt, index): SIGTERM to its process group, SIGKILL after grace."""
    current_agent().stop_replica(StopReplica.decode(message))


@app.task(name=CLEANUP_TASK)
def cleanup_job(message: str) -> None:
    """Remove a finished job's scratch files on this node (checkpoints, temp)."""
    current_agent().cleanup_job(CleanupJob.decode(message))
