"""What a job's MLflow run says, from the job and its stored points (pure: no I/O).

* Params: the job's hyperparameters under their own names (nested objects flattened with
  dots, `optimizer.learning_rate`, as MLflow users log them), and the spec's main fields
  as `cohort.<field>` (`cohort.strategy`, `cohort.replicas`, `cohort.command`, ...), so a
  hyperparameter never collides with one of them.
* Metrics: replica 0's points under their own names (`loss`): MLflow's convention is that
  rank 0 logs a distributed run, so comparing runs, and a 1-replica job, read as usual;
  replica i's under `replica_<i>/<name>` in the same run, which MLflow's charts group in
  a section per replica (as its own system metrics do per node, `system/<node>/...`).
  Every point of every attempt: a restarted gang's repeated steps are further values at
  those steps, each at its own time.
* Tags: `cohort.job_id`, `cohort.project`, `cohort.replicas`, `cohort.status`,
  `cohort.attempt`, `cohort.reason`, `cohort.model_uri` (where Cohort keeps the model).
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Iterator, Mapping
from typing import Any

from services.statuses import JobStatus

# MLflow's limits (mlflow/utils/validation.py): a key's length, a param's and a tag's value.
MAX_KEY = 250
MAX_PARAM_VALUE = 6000
MAX_TAG_VALUE = 8000
_NOT_IN_A_KEY = re.compile(r"[^/\w.\- :]")  # what MLflow refuses in a metric or param name

# The run's end, by the job's.
RUN_STATUS = {
    JobStatus.SUCCEEDED: "FINISHED",
    JobStatus.FAILED: "FAILED",
    JobStatus.CANCELLED: "KILLED",
}

# The spec's fields a run records as `cohort.<field>` params (when set).
SPEC_PARAMS = (
    "trainer",
    "command",
    "image",
    "bundle",
    "strategy",
    "replicas",
    "gpus_per_replica",
    "roles",
    "distribution",
    "restart_policy",
    "max_restarts",
    "priority",
)


def mlflow_key(name: str) -> str:
    """`name` as a key MLflow takes: characters it refuses become `_`, and a name that
    would resolve to another path (`a//b`, `../x`) loses its slashes."""
    key = _NOT_IN_A_KEY.sub("_", name)[:MAX_KEY]
    normal = posixpath.normpath(key)
    if normal != key or normal == "." or key.startswith(("..", "/")):
        key = "_" + key.replace("/", "_")[: MAX_KEY - 1]
    return key


def metric_key(name: str, replica: int) -> str:
    """The key of replica `replica`'s series `name` in its job's run."""
    return mlflow_key(name if replica == 0 else f"replica_{replica}/{name}")


def _value(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else _text(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _text(value: Any) -> str:
    if isinstance(value, bool | int | float) or value is None:
        return str(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _flatten(prefix: str, value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, Mapping) and value:
        for key, inner in value.items():
            yield from _flatten(f"{prefix}.{key}" if prefix else str(key), inner)
    else:
        yield prefix, value


def run_params(job: Any) -> dict[str, str]:
    """The run's params: `job`'s hyperparameters, then its spec's main fields (first of
    two names that come out as one key wins: MLflow refuses a param logged twice with
    different values)."""
    params: dict[str, str] = {}
    pairs = list(_flatten("", job.hyperparameters or {}))
    for field in SPEC_PARAMS:
        value = getattr(job, field, None)
        if value not in (None, "", {}, []):
            pairs.extend(_flatten(f"cohort.{field}", value))
    for name, value in pairs:
        params.setdefault(mlflow_key(name or "_"), _value(value, MAX_PARAM_VALUE))
    return params


def run_tags(job: Any, *, project: str, model_uri: str) -> dict[str, str]:
    """The run's tags for the job as it is now."""
    tags = {
        "cohort.job_id": str(job.id),
        "cohort.project": project,
        "cohort.replicas": str(job.replicas),
        "cohort.status": str(job.status),
        "cohort.attempt": str(job.attempt),
        "cohort.model_uri": model_uri,
    }
    if job.reason:
        tags["cohort.reason"] = _value(job.reason, MAX_TAG_VALUE)
    return tags


def run_name(job: Any) -> str:
    """The run's name: the job's, with its id (a job name is often reused)."""
    return f"{job.name}-{job.id}"
