"""What a stored job tells each of its replicas: the `ReplicaSpec` in a start message.

The replica spec's fields that the job spec (services/jobs/spec.py) declares too are
copied from the stored job by name, so a job field replicas need is one line in
`ReplicaSpec`; `REPLICA_FORMS` lists the ones whose replica form differs from the
stored one. The other fields say which replica it is (`PER_REPLICA`), or what the
control plane resolved at submission (`RESOLVED`: the job's requirements, an evaluation
job's files, and what a schedule's fire told it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any, Protocol, cast

from services.jobs.inputs import resolve_inputs
from services.jobs.spec import JobSpec
from services.jobs.spec_parts import Hyperparameters
from services.models import Job
from services.wire.replica import (
    DistributionOptions,
    EvaluationFiles,
    Profile,
    ReplicaSpec,
    Role,
    StartReplica,
)


class PlacedOn(Protocol):
    """One replica of an attempt where it was placed: a `Replica` row, or one the
    scheduler's pass is placing (not yet an ORM object)."""

    @property
    def attempt(self) -> int: ...
    @property
    def index(self) -> int: ...
    @property
    def role(self) -> str: ...
    @property
    def role_index(self) -> int: ...
    @property
    def node_id(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def gpu_ids(self) -> str: ...
    @property
    def tf_config(self) -> dict[str, Any] | None: ...


def _profile(job: Job, index: int) -> Profile | None:
    """The job's profile range, on the replicas it names (default: the chief)."""
    if not job.profile or index not in job.profile.get("replicas", [0]):
        return None
    first, last = job.profile["steps"]
    return Profile(first_step=first, last_step=last)


def _hyperparameters(job: Job, _index: int) -> dict[str, Any]:
    """A trainer's context holds the built-in knobs' defaults under what the job gave (as
    it always has: trainers read `ctx.hyperparameters["epochs"]`); a command gets what
    the job gave, no more (services/jobs/spec.py `stored_hyperparameters`)."""
    if job.trainer is None:
        return dict(job.hyperparameters)
    return {**_builtin_knobs(), **job.hyperparameters}


@cache
def _builtin_knobs() -> dict[str, Any]:
    # Dumped once, not once per replica a pass places (a model built and dumped each
    # time): the defaults are constants and scalars, copied into each spec's own dict.
    return Hyperparameters().model_dump(mode="json")


# Spec fields a replica gets in another form than the stored one.
REPLICA_FORMS: dict[str, Callable[[Job, int], Any]] = {
    "hyperparameters": _hyperparameters,
    "inputs": lambda job, _: resolve_inputs(job),  # "data/<path>" -> the store's key
    "distribution": lambda job, _: DistributionOptions(**(job.distribution or {})),
    "profile": _profile,  # only on the replicas it names
}
# The forms that differ from one replica of a job to another (the others are the job's).
BY_INDEX = frozenset({"profile"})
# The replica spec's fields that are not the job's: which replica of which attempt.
PER_REPLICA = frozenset({"job_id", "attempt", "index", "role", "role_index"})
# Fields the control plane resolved at submission, from columns of its own: the
# requirements come from the job's `pip` or its bundle's requirements.txt.
RESOLVED: dict[str, Callable[[Job], Any]] = {
    "requirements": lambda job: (job.requirements or "").splitlines(),
    # An evaluation job's model and holdout files (services/retraining/evaluation.py).
    "evaluation": lambda job: EvaluationFiles(**job.evaluation) if job.evaluation else None,
    # What the schedule's fire that made it (or its sweep) tells it.
    "schedule_env": lambda job: dict(job.schedule_env or {}),
}
FROM_JOB = tuple(
    field.name for field in dataclasses.fields(ReplicaSpec) if field.name in JobSpec.model_fields
)


def start_message(job: Job, replica: PlacedOn) -> StartReplica:
    """Everything an agent needs to start one replica (agents cannot read SQL). The spec
    checks the stored values again as it is built."""
    return start_messages(job, [replica])[0]


def start_messages(job: Job, replicas: Sequence[PlacedOn]) -> list[StartReplica]:
    """start_message for each of a gang's `replicas`. What is the job's, not the
    replica's, is worked out once for the gang (a pass places hundreds of gangs); each
    spec is checked as it is built, as one alone is."""
    shared = {name: getattr(job, name) for name in FROM_JOB if name not in REPLICA_FORMS}
    shared |= {name: form(job, 0) for name, form in REPLICA_FORMS.items() if name not in BY_INDEX}
    shared |= {name: resolve(job) for name, resolve in RESOLVED.items()}
    return [
        StartReplica(
            replica.node_id,
            ReplicaSpec(
                job_id=job.id,
                attempt=replica.attempt,
                index=replica.index,
                role=cast(Role, replica.role),  # stored by placement from the same Literal
                role_index=replica.role_index,
                **shared,
                **{name: REPLICA_FORMS[name](job, replica.index) for name in BY_INDEX},
            ),
            tf_config=replica.tf_config,
            port=replica.port,
            gpu_ids=replica.gpu_ids,
        )
        for replica in replicas
    ]
