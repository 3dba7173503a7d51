"""Control plane -> agent -> replica: the replica spec, and the messages to node agents.

`ReplicaSpec` is everything a replica process needs from the control plane. The
scheduler fills it from SQL (services/jobs/replica_specs.py), the agent writes it to
the replica's own directory as a `ReplicaLaunch` (with that directory), and the
runner decodes it there (workers/replica/runner.py). A job field (services/jobs/spec.py)
that replicas need is one line in `ReplicaSpec`, under the same name: it is copied
from the stored job by name, and tests/unit/test_job_spec.py checks the two agree.

Services decide *what* to send; workers/control/dispatch.py sends it through Celery,
only after the transaction that decided it has committed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt, model_validator
from pydantic.dataclasses import dataclass

from services.wire.contract import STRICT, Attempt, Contract, Id
from services.wire.policy import check_image

Strategy = Literal["multi_worker_mirrored", "mirrored", "one_device", "parameter_server"]
# A process's part in its gang. Every strategy but parameter_server runs `worker`s only.
Role = Literal["chief", "worker", "ps", "evaluator"]
# MultiWorkerMirrored: auto|ring|nccl; Mirrored (cross_device_ops): auto|nccl|
# hierarchical_copy|reduce_to_one. The API checks which fits the job.
Communication = Literal["auto", "ring", "nccl", "hierarchical_copy", "reduce_to_one"]
MixedPrecision = Literal["mixed_float16", "mixed_bfloat16"]
ShardPolicy = Literal["auto", "file", "data", "off"]

# The agent's Celery tasks (workers/node/tasks.py): each takes one encoded message.
START_TASK = "workers.node.tasks.start_replica"
STOP_TASK = "workers.node.tasks.stop_replica"
CLEANUP_TASK = "workers.node.tasks.cleanup_job"
CHECKPOINT_TASK = "workers.node.tasks.checkpoint_replica"


class DistributionOptions(BaseModel):
    """How a replica's strategy distributes the work: the job's `distribution:` block, as
    users write it and as the replica spec carries it (one class for both).

    The API refuses unknown keys, each named; a replica ignores them (`Contract.decode`),
    as every contract does. Which options fit which strategy: services/jobs/strategies.py
    (a 422 naming the field); the runner applies them before the trainer builds its model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    communication: Communication = Field(  # MWMS CommunicationOptions / Mirrored's ops
        "auto",
        examples=["ring"],
        description="multi_worker_mirrored: auto|ring|nccl; mirrored: auto|nccl|"
        "hierarchical_copy|reduce_to_one; others: auto",
    )
    mixed_precision: MixedPrecision | None = Field(  # the Keras global policy
        None,
        examples=["mixed_float16"],
        description="a Keras mixed-precision policy; unset: float32",
    )
    gradient_accumulation_steps: StrictInt = Field(
        1,
        ge=1,
        le=1024,
        examples=[4],
        description="batches whose gradients are summed "
        "before each optimizer step (a larger effective batch)",
    )
    shard_policy: ShardPolicy = Field(  # tf.data AutoShardPolicy of the built-ins' datasets
        "auto",
        examples=["data"],
        description="how tf.data shards the input across workers "
        "(file is refused for the built-in trainers)",
    )
    # Logical CPU devices to split this process's CPU into (mirrored on CPU, tests).
    cpu_devices: StrictInt | None = Field(
        None,
        ge=1,
        le=64,
        examples=[2],
        description="logical CPU devices of the process (mirrored, one_device)",
    )
    # Devices one replica spreads its model over (model parallelism), listed in the context.
    devices_per_replica: StrictInt = Field(
        1, ge=1, le=64, examples=[1], description="model parallelism"
    )


@dataclass(frozen=True, config=STRICT)
class Profile(Contract):
    """Capture a TensorBoard profile of steps first_step..last_step on these replicas."""

    first_step: Annotated[int, Field(ge=1)]
    last_step: Annotated[int, Field(ge=1)]

    @model_validator(mode="after")
    def _ordered(self) -> Profile:
        if self.last_step < self.first_step:
            raise ValueError("'last_step' must not come before 'first_step'")
        return self


def _relative_files(files: dict[str, str]) -> dict[str, str]:
    """Refuse a local path that could leave its directory: absolute, with an empty,
    '.' or '..' segment, a backslash or a control character."""
    for rel in files:
        parts = rel.split("/")
        bad = any(not part or part in (".", "..") for part in parts)
        if bad or "\\" in rel or any(ord(c) < 32 for c in rel):
            raise ValueError(f"{rel!r} is not a relative path inside its directory")
    return files


Files = Annotated[dict[str, str], AfterValidator(_relative_files)]


@dataclass(frozen=True, config=STRICT)
class EvaluationFiles(Contract):
    """An evaluation job's inputs (services/retraining/evaluation.py): {relative path:
    store key} of the evaluated model's files and of the holdout's, which the agent
    fetches read-only under the job's input directory (workers/layout.py)."""

    model: Files
    holdout: Files


@dataclass(frozen=True, config=STRICT)
class ReplicaSpec(Contract):
    """One replica of one attempt of a job, as its process runs it."""

    job_id: Id
    attempt: Attempt
    index: Id
    replicas: Annotated[int, Field(ge=1)]
    trainer: Annotated[str, Field(min_length=1)] | None  # None: `command` runs instead
    strategy: Strategy
    hyperparameters: dict[str, Any] = Field(default_factory=dict)
    # The job's code bundle (sha256 digest), unpacked into the replica's work_dir/code.
    bundle: Annotated[str, Field(pattern=r"^(sha256:)?[0-9a-f]{64}$")] | None = None
    command: list[str] | None = None  # argv, never through a shell
    # None: a process on the node's interpreter; else a container of this image
    # (workers/node/containers.py), checked again here as the agent decodes it.
    image: Annotated[str, AfterValidator(check_image)] | None = None
    env: dict[str, str] = Field(default_factory=dict)  # the job's own variables
    # Local file name -> full store key, fetched into the job's input directory.
    inputs: dict[str, str] = Field(default_factory=dict)
    # None: the cluster's PROGRESS_TIMEOUT; 0: no progress watchdog.
    progress_timeout_seconds: Annotated[int, Field(ge=0)] | None = None
    # The process's part (parameter_server: chief/worker/ps/evaluator) and its index
    # among its role's processes; `index` stays its place in the whole gang.
    role: Role = "worker"
    role_index: Id = 0
    distribution: DistributionOptions = Field(default_factory=DistributionOptions)
    profile: Profile | None = None  # None: no profile on this replica
    # The normalised requirement lines (services/wire/requirements.py) of the environment
    # the agent builds and runs it in (workers/node/envs.py); empty: the node's interpreter.
    requirements: list[str] = Field(default_factory=list)
    # An evaluation job: the trainer module's evaluate(ctx), or the command, runs on these.
    evaluation: EvaluationFiles | None = None
    # A scheduled run's COHORT_SCHEDULED_FOR, data interval or data version
    # (services/retraining/fire_env.py), set after the job's `env`, which cannot shadow them.
    schedule_env: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _index_in_gang(self) -> ReplicaSpec:
        if self.index >= self.replicas:
            raise ValueError(f"'index' {self.index} is out of range for {self.replicas} replicas")
        if (self.trainer is None) == (self.command is None):
            raise ValueError("exactly one of 'trainer' and 'command' must be set")
        return self


def _absolute(path: Path) -> Path:
    if not path.is_absolute():
        raise ValueError(f"must be an absolute path, got {str(path)!r}")
    return path


@dataclass(frozen=True, config=STRICT)
class ReplicaLaunch(Contract):
    """What the agent hands a replica process, in a file only that replica reads."""

    spec: ReplicaSpec
    job_dir: Annotated[Path, AfterValidator(_absolute)]  # the job's directory on this node
    # Steps a second above which Cohort's runner ships one step's points in several
    # (workers/step_records.py; the node's COHORT_STEP_POINTS_PER_SECOND); 0: every step.
    step_points_per_second: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0


@dataclass(frozen=True, config=STRICT)
class StartReplica(Contract):
    """Start one replica on node `node_id`, with its place in the gang."""

    node_id: str
    spec: ReplicaSpec
    tf_config: dict[str, Any] | None = None  # None: a one-replica job (no TF_CONFIG)
    port: Annotated[int, Field(ge=0, le=65535)] | None = None
    gpu_ids: str = ""  # CUDA_VISIBLE_DEVICES: "0,1", or "" for none


@dataclass(frozen=True, config=STRICT)
class StopReplica(Contract):
    """SIGTERM replica (job, attempt, index) on node `node_id`, SIGKILL after the grace."""

    node_id: str
    job_id: Id
    attempt: Attempt
    index: Id
    grace_seconds: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 10.0


@dataclass(frozen=True, config=STRICT)
class CleanupJob(Contract):
    """Remove a finished job's scratch files (checkpoints, temp) on one node."""

    node_id: str
    job_id: Id


@dataclass(frozen=True, config=STRICT)
class CheckpointReplica(Contract):
    """Ask replica (job, attempt, index) on node `node_id` to checkpoint now: its agent
    sends SIGUSR1 to its process (group or container); the replica saves into
    $COHORT_CHECKPOINT_DIR and exits 75 (services/exit_codes.py CHECKPOINTED)."""

    node_id: str
    job_id: Id
    attempt: Attempt
    index: Id


Message = StartReplica | StopReplica | CleanupJob | CheckpointReplica


class Dispatcher(Protocol):
    def send(self, messages: list[Message]) -> None:
        """Deliver messages to the agents' queues (best effort; the scheduler re-sends)."""
        ...
