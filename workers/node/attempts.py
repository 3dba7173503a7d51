"""A job's current attempt as the agents see it: the number the scheduler publishes in
Redis when it places an attempt (workers/control/dispatch.py publish_attempts).

A start of any other attempt is refused (agent.py), and an attempt that is no longer the
job's writes nothing more over the job's shared checkpoint and model (sidecar.py): a chief
frozen, or cut off from the control plane, and torn down while its gang was placed again
elsewhere, would otherwise send its late checkpoint over the one the new attempt trains
from.
"""

from __future__ import annotations

from typing import Any

from services.wire.keys import attempt_key


def current_attempt(client: Any, job_id: int) -> int | None:
    """The job's current attempt; None when Redis holds none (not placed yet, or Redis
    lost it: the leader writes it again on its next pass). Raises what redis-py raises."""
    value = client.get(attempt_key(job_id))
    return None if value is None else int(value)


def superseded(client: Any, job_id: int, attempt: int) -> bool:
    """Whether a later attempt than `attempt` is the job's. Raises what redis-py raises:
    not knowing is not the same as knowing it is still current."""
    current = current_attempt(client, job_id)
    return current is not None and current > attempt
