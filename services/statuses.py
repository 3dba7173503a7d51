"""Job and replica statuses, and the one table of allowed job status changes."""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    QUEUED = "queued"
    SCHEDULED = "scheduled"
    RUNNING = "running"
    RESTARTING = "restarting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL_STATUSES: frozenset[JobStatus] = frozenset(
    {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED}
)

# Statuses in which a job holds (or is about to hold) slots on nodes.
ACTIVE_STATUSES: frozenset[JobStatus] = frozenset({JobStatus.SCHEDULED, JobStatus.RUNNING})

# Every edge a job may take. Terminal statuses have none: they are final.
# A job never moves to the status it already has (a redelivered message must
# not record a second `scheduled`).
ALLOWED_TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    JobStatus.QUEUED: frozenset({JobStatus.SCHEDULED, JobStatus.FAILED, JobStatus.CANCELLED}),
    JobStatus.SCHEDULED: frozenset(
        {JobStatus.RUNNING, JobStatus.RESTARTING, JobStatus.FAILED, JobStatus.CANCELLED}
    ),
    JobStatus.RUNNING: frozenset(
        {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.RESTARTING}
    ),
    JobStatus.RESTARTING: frozenset({JobStatus.QUEUED, JobStatus.FAILED, JobStatus.CANCELLED}),
    JobStatus.SUCCEEDED: frozenset(),
    JobStatus.FAILED: frozenset(),
    JobStatus.CANCELLED: frozenset(),
}


def is_allowed(current: JobStatus, target: JobStatus) -> bool:
    """Whether a job in `current` may move to `target`."""
    return target in ALLOWED_TRANSITIONS[current]


class ReplicaStatus(StrEnum):
    PENDING = "pending"  # placed, start message sent, no process yet
    RUNNING = "running"  # the agent started the process
    SUCCEEDED = "succeeded"  # exited 0
    FAILED = "failed"  # exited non-zero
    STOPPED = "stopped"  # torn down by Cohort (cancel, gang failure, restart)
    LOST = "lost"  # its node stopped answering


TERMINAL_REPLICA_STATUSES: frozenset[ReplicaStatus] = frozenset(
    {ReplicaStatus.SUCCEEDED, ReplicaStatus.FAILED, ReplicaStatus.STOPPED, ReplicaStatus.LOST}
)


class SweepStatus(StrEnum):
    RUNNING = "running"  # trials still to create or still going
    SUCCEEDED = "succeeded"  # every trial ended, at least one succeeded
    FAILED = "failed"  # every trial ended, none succeeded (or no objective value)
    CANCELLED = "cancelled"


TERMINAL_SWEEP_STATUSES: frozenset[SweepStatus] = frozenset(
    {SweepStatus.SUCCEEDED, SweepStatus.FAILED, SweepStatus.CANCELLED}
)


class NodeStatus(StrEnum):
    READY = "ready"
    LOST = "lost"
    # Beating, but its agent has not yet said which GPUs it offers (discovery and the
    # TensorFlow probe take seconds): alive, but not offered to the placer, whose
    # "unschedulable" would otherwise count a node with GPUs as one without.
    PENDING = "pending"


class NodeCordon(StrEnum):
    """Why a live node takes no new replicas (None on the node: it takes them). Apart from
    its status, which its heartbeats set: a drained node that beats stays drained."""

    DRAIN = "drain"  # an operator's `cohort node drain`, or its agent's SIGTERM
    QUARANTINE = "quarantine"  # replicas failed or straggled there too often


# A node whose agent beats: its replicas are its agent's to report.
LIVE_NODE_STATUSES = frozenset({NodeStatus.READY, NodeStatus.PENDING})
