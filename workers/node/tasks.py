"""Celery tasks run by a node agent. Each is short: it starts or stops a process and returns.

The replica's process is supervised by the agent, not by the task, so no task
ever lasts as long as a training run (a Redis broker would redeliver it).
"""

from __future__ import annotations

from typing import Any

from workers.celery_app import app
from workers.node.agent import current_agent


@app.task(name="workers.node.tasks.start_replica")
def start_replica(payload: dict[str, Any]) -> None:
    """Start replica (job, attempt, index) on this node, unless it was started already."""
    current_agent().start_replica(payload)


@app.task(name="workers.node.tasks.stop_replica")
def stop_replica(job_id: int, attempt: int, index: int, grace_seconds: float = 10.0) -> None:
    """Stop replica (job, attempt, index): SIGTERM to its process group, SIGKILL after grace."""
    current_agent().stop_replica(int(job_id), int(attempt), int(index), float(grace_seconds))


@app.task(name="workers.node.tasks.cleanup_job")
def cleanup_job(job_id: int) -> None:
    """Remove a finished job's scratch files on this node (checkpoints, temp)."""
    current_agent().cleanup_job(int(job_id))
