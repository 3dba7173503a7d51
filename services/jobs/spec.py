"""The job spec: the fields a user gives, declared once.

`JobSpec` declares each field with its type, bounds, default, description and example;
every other shape of a job is derived from it:

- the create schema `JobCreate` (services/jobs/schemas.py) is the spec plus the checks a
  submission passes;
- the read view `JobRead` (same module) is the spec plus what the control plane writes
  (id, status, attempt, ...);
- the stored row: `stored_columns` dumps the spec into the `jobs` columns of the same
  names (services/models/jobs.py; tests/unit/test_job_spec.py fails on a field without
  its column);
- the replica spec: the fields `ReplicaSpec` (services/wire/replica.py) declares under a
  spec field's name are copied from the stored job (services/jobs/replica_specs.py).

A new job field: a field here, its column and migration, a line in `ReplicaSpec` if
replicas need it, and where it is used.
"""

from __future__ import annotations

from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, Field, StrictInt

from services.jobs.spec_parts import Hyperparameters, ProfileRequest, RolePlacement, Roles
from services.jobs.trainers import BUILTIN_TRAINERS
from services.wire.policy import MAX_COMMAND_ARGS
from services.wire.replica import DistributionOptions, Strategy

RestartPolicy = Literal["never", "on_failure", "exit_code"]
Placement = Literal["pack", "spread"]


class JobSpec(BaseModel):
    """A training job as its user describes it."""

    name: str = Field(
        "job",
        min_length=1,
        max_length=128,
        examples=["digits-mlp"],
        description="a display name: letters, digits, spaces, '.', '_', '-'",
    )
    trainer: str | None = Field(
        "mlp_digits",
        min_length=1,
        max_length=256,
        examples=["mlp_digits", "train:main"],
        description="a built-in trainer or `module:function` (in the bundle, or allow-listed); "
        "give either this or `command`",
    )
    command: list[str] | None = Field(
        None,
        min_length=1,
        max_length=MAX_COMMAND_ARGS,
        examples=[["python", "train.py"]],
        description="argv of the process each replica runs in its bundle's directory "
        '(never through a shell), e.g. ["python", "train.py"]',
    )
    bundle: str | None = Field(
        None,
        examples=["sha256:" + "0" * 64],
        description="the code bundle (`sha256:<hex>`) unpacked into each replica's "
        "working directory; upload it with PUT /api/v1/bundles/{digest}",
    )
    image: str | None = Field(
        None,
        max_length=255,
        examples=["localhost/team-tf:1"],
        description="run each replica as a container of this image (built FROM "
        "cohort-worker) on a node whose agent has a container engine; unset: a process "
        "on the node's own interpreter",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        examples=[{"LOG_LEVEL": "debug"}],
        description="environment "
        "variables for the replicas (not TF_CONFIG, COHORT_*, AIP_*, LD_*, PYTHON*)",
    )
    pip: list[str] = Field(
        default_factory=list,
        max_length=500,
        examples=[["tabulate==0.9.0"]],
        description="requirement lines the job's environment installs (pip's "
        "requirements.txt syntax, --hash allowed; not TensorFlow, Keras, tf-keras or "
        "cohort); or a requirements.txt at the bundle's top level, not both",
    )
    inputs: dict[str, str] = Field(
        default_factory=dict,
        examples=[{"train.csv": "data/digits/train.csv"}],
        description="files of the project's data each replica gets in "
        'COHORT_INPUT_DIR: {local file name: "data/<path>"}, e.g. '
        '{"train.csv": "data/digits/train.csv"}; upload with PUT /api/v1/data/{path}',
    )
    progress_timeout_seconds: StrictInt | None = Field(
        None,
        ge=0,
        le=7 * 86400,
        examples=[600],
        description="longest quiet spell before a running replica counts as hung; unset: "
        "the cluster's default; 0: no progress watchdog (start-up and deadline still apply)",
    )
    strategy: Strategy = Field(
        "multi_worker_mirrored",
        examples=["one_device"],
        description="the tf.distribute "
        "strategy: multi_worker_mirrored, mirrored, parameter_server or one_device",
    )
    replicas: StrictInt = Field(
        2,
        ge=1,
        le=100_000,
        examples=[2],
        description="processes in the gang "
        "(at most COHORT_MAX_REPLICAS); with `roles`: their sum "
        "(set it only to that)",
    )
    gpus_per_replica: StrictInt = Field(
        0, ge=0, le=16, examples=[1], description="GPUs each replica gets (0: CPU only)"
    )
    roles: Roles | None = Field(
        None,
        examples=[{"chief": 1, "worker": 2, "ps": 1}],
        description="parameter_server only: {chief: 1, worker: N, ps: M, evaluator: 0|1}",
    )
    role_placement: RolePlacement | None = Field(
        None,
        examples=[{"chief": "separate", "ps": "any"}],
        description="parameter_server only: {chief: any|separate, ps: any|separate}",
    )
    distribution: DistributionOptions = Field(
        default_factory=DistributionOptions,
        examples=[{"communication": "ring"}],
        description="how the strategy distributes the work: "
        "communication, mixed_precision, gradient_accumulation_steps, shard_policy, "
        "cpu_devices, devices_per_replica (which fit which strategy: README)",
    )
    profile: ProfileRequest | None = Field(
        None,
        examples=[{"steps": [10, 15], "replicas": [0]}],
        description="{steps: [first, last], replicas: [indexes]} (default: replica 0)",
    )
    hyperparameters: Hyperparameters = Field(
        default_factory=Hyperparameters,
        examples=[{"epochs": 3, "steps_per_epoch": 50, "hidden_units": 128}],
        description="the trainer's knobs: epochs, steps_per_epoch, batch_size, learning_rate, "
        "and any JSON your code reads (bounded in size, keys and depth; the built-in "
        "trainers' model sizes, e.g. hidden_units 1-4096, are bounded too)",
    )
    restart_policy: RestartPolicy = Field(
        "never",
        examples=["on_failure"],
        description="never; on_failure: any failure but a permanent one (e.g. 127, a "
        "SyntaxError); exit_code: only a retryable one (e.g. 137, a lost node)",
    )
    max_restarts: StrictInt = Field(
        0, ge=0, le=100, examples=[3], description="restarts of the whole gang at most"
    )
    priority: StrictInt = Field(
        0,
        ge=-1000,
        le=1000,
        examples=[10],
        description=("higher is placed first; equal priorities in submission order"),
    )
    placement: Placement | None = Field(
        None,
        examples=["spread"],
        description="pack: fewest nodes; spread: one replica per node where it can; "
        "unset: the cluster's default",
    )
    active_deadline_seconds: StrictInt | None = Field(
        None,
        ge=1,
        le=90 * 86400,
        examples=[3600],
        description="the job fails once it has run this long, restarts included",
    )
    ttl_seconds_after_finished: StrictInt | None = Field(
        None,
        ge=0,
        le=365 * 86400,
        examples=[86400],
        description="remove its checkpoints this long after it finished; unset: keep them",
    )


# The fields of the first jobs ever stored. The idempotency hash covers them always, and
# a field added since only once it differs from its default: a retry of a spec stored
# before that field existed still matches its Idempotency-Key's hash.
HASHED_ALWAYS = frozenset(
    {
        "name",
        "trainer",
        "strategy",
        "replicas",
        "gpus_per_replica",
        "hyperparameters",
        "restart_policy",
        "max_restarts",
        "priority",
        "placement",
        "active_deadline_seconds",
        "ttl_seconds_after_finished",
    }
)


def added_fields_at_default(spec: JobSpec) -> set[str]:
    """The fields outside `HASHED_ALWAYS` that the spec leaves at their defaults: what the
    idempotency hash (services/jobs/store.py) leaves out."""
    return {name for name, default in _defaults().items() if getattr(spec, name) == default}


@cache
def _defaults() -> dict[str, Any]:
    # Built once: a default factory's model (Hyperparameters, DistributionOptions) costs
    # more than the comparison, on every submission. Only compared, never handed out.
    return {
        name: field.get_default(call_default_factory=True)
        for name, field in JobSpec.model_fields.items()
        if name not in HASHED_ALWAYS
    }


def stored_hyperparameters(spec: JobSpec) -> dict[str, Any]:
    """The hyperparameters a job stores: a built-in trainer's with the defaults of the
    knobs it reads (epochs, steps_per_epoch, ...); a command's or the job's own trainer's
    only as the job gave them. Their code reads its own defaults, and a default it never
    asked for would show as a length it does not run (services/telemetry/progress.py)."""
    given = spec.trainer is None or spec.trainer not in BUILTIN_TRAINERS
    return spec.hyperparameters.model_dump(mode="json", exclude_unset=given)


def stored_columns(spec: JobSpec) -> dict[str, Any]:
    """The spec as the `jobs` row stores it: a column per field, nested blocks as JSON."""
    columns = spec.model_dump(mode="json", include=set(JobSpec.model_fields))
    columns["hyperparameters"] = stored_hyperparameters(spec)
    return columns
