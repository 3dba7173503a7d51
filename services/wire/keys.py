"""Every Redis key, stream and Celery queue name the processes share.

Agents and replicas hold no SQL credentials: they talk to the control plane through
these names alone (Celery queues `node.<id>` in, the streams and hashes out).
"""

from __future__ import annotations

METRICS_STREAM = "cohort:metrics"  # replicas -> ingester: metric batches
EVENTS_STREAM = "cohort:events"  # agents, api -> scheduler: replica started / exited, wake
NODES_HASH = "cohort:nodes"  # agents -> scheduler: heartbeat per node id
SCHEDULER_LOCK = "cohort:scheduler:lock"  # one active scheduler at a time
SCHEDULER_PASS = "cohort:scheduler:pass"  # the leader's last pass, unix time (`cohort health`)
PROGRESS_HASH = "cohort:progress"  # replicas -> scheduler: "job:attempt:index" -> unix time
# agents -> scheduler: "job:attempt:index" -> how many bytes of output the replica has
# written (its log file's size): output is a sign of life once its gang has formed
# (services/cluster/running_checks.py).
OUTPUT_HASH = "cohort:output"
LOGS_STREAM = "cohort:logs"  # agents -> ingester: replica log lines
STATS_HASH = "cohort:stats"  # ingester -> api /metrics: counters
# The leader's consumer group on the streams it reads (ingest, events): the api's job
# streams ask it how far the ingest has stored (services/telemetry/settling.py).
LEADER_GROUP = "cohort-scheduler"
GENERATION_KEY = "cohort:generation"  # missing or changed: Redis lost its data (generation.py)

STREAM_MAXLEN = 1_000_000


def attempt_key(job_id: int) -> str:
    """Holds a job's current attempt, so an agent can refuse a stale start message."""
    return f"cohort:attempt:{int(job_id)}"


def claim_key(job_id: int, attempt: int, index: int) -> str:
    """Claimed (SET NX) by the one agent that starts this replica: never two processes."""
    return f"cohort:claim:{int(job_id)}:{int(attempt)}:{int(index)}"


def node_queue(node_id: str) -> str:
    """The Celery queue that only node `node_id`'s agent consumes."""
    return f"node.{node_id}"


def progress_field(job_id: int, attempt: int, index: int) -> str:
    """The field of PROGRESS_HASH (and OUTPUT_HASH) holding replica (job, attempt,
    index)'s last beat."""
    return f"{int(job_id)}:{int(attempt)}:{int(index)}"


def live_key(job_id: int) -> str:
    """The Redis stream with job `job_id`'s newly stored rows (its live feed)."""
    return f"cohort:live:{int(job_id)}"


def login_failures_key(address: str) -> str:
    """The count of failed dashboard logins from client `address` in the current window."""
    return f"cohort:login-failures:{address}"
