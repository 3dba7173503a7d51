"""Pydantic I/O schemas shared by the REST API, the CLI and the services."""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    field_validator,
    model_validator,
)

from services.statuses import JobStatus, NodeStatus, ReplicaStatus
from services.storage.keys import bundle_digest_hex
from services.wire.policy import MAX_COMMAND_ARGS, check_command, check_env, check_inputs
from services.wire.replica import (  # one list of each choice for the spec and the API
    Communication,
    Distribution,
    MixedPrecision,
    ShardPolicy,
    Strategy,
)

RestartPolicy = Literal["never", "on_failure", "exit_code"]
Placement = Literal["pack", "spread"]
RolePlacementChoice = Literal["any", "separate"]

_ENTRYPOINT = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_NAME = re.compile(r"^[\w.\- ]+$")


def check_name(value: str) -> str:
    """A job's or sweep's display name: letters, digits, spaces, '.', '_' or '-'."""
    if not _NAME.fullmatch(value):
        raise ValueError("use letters, digits, spaces, '.', '_' or '-'")
    return value


class Hyperparameters(BaseModel):
    """Training knobs every built-in trainer honours, plus any JSON the job's code reads.

    Extras may be any JSON (numbers, strings, lists, nested objects) under identifier
    names; their encoded size is bounded by COHORT_MAX_HYPERPARAMETERS_BYTES."""

    model_config = ConfigDict(extra="allow")

    epochs: StrictInt = Field(
        5, ge=1, le=100_000, examples=[5], description="passes over the training steps"
    )
    steps_per_epoch: StrictInt = Field(
        20,
        ge=1,
        le=10_000_000,
        examples=[20],
        description=("training steps per epoch; epochs x steps_per_epoch is at most 100,000,000"),
    )
    batch_size: StrictInt = Field(32, ge=1, le=65_536, description="per replica", examples=[32])
    learning_rate: float = Field(
        0.01, gt=0, le=10, strict=True, examples=[0.01], description="the optimizer's step size"
    )

    @model_validator(mode="after")
    def _extras_are_named(self) -> Hyperparameters:
        # Top-level names are identifiers: trainers read them as keyword-like keys.
        for key in self.model_extra or {}:
            if not re.fullmatch(r"[A-Za-z_]\w{0,63}", key):
                raise ValueError(f"hyperparameter name {key!r} must be an identifier")
        return self


class Roles(BaseModel):
    """The processes of a parameter_server job, by role (TFJob's replica types)."""

    model_config = ConfigDict(extra="forbid")

    chief: StrictInt = Field(
        1,
        ge=1,
        le=1,
        examples=[1],
        description="runs the training loop (ClusterCoordinator); its exit 0 is the job's success",
    )
    worker: StrictInt = Field(
        ge=1,
        le=1024,
        examples=[2],
        description="tf.distribute.Server processes "
        "running the chief's closures; one lost is restarted alone",
    )
    ps: StrictInt = Field(
        ge=1, le=256, examples=[1], description="parameter servers holding the variables"
    )
    evaluator: StrictInt = Field(
        0,
        ge=0,
        le=1,
        examples=[0],
        description="a sidecar evaluating the chief's checkpoints, on the chief's node",
    )

    @property
    def total(self) -> int:
        return self.chief + self.worker + self.ps + self.evaluator


class RolePlacement(BaseModel):
    """Where a parameter_server job's chief and ps go relative to its workers."""

    model_config = ConfigDict(extra="forbid")

    chief: RolePlacementChoice = Field(
        "any",
        examples=["separate"],
        description="separate: not on a node that runs one of the job's workers or ps",
    )
    ps: RolePlacementChoice = Field(
        "any",
        examples=["any"],
        description="separate: not on a node that runs the job's chief or a worker",
    )


class ProfileRequest(BaseModel):
    """Capture a TensorBoard profile of a step range on some replicas."""

    model_config = ConfigDict(extra="forbid")

    steps: tuple[
        Annotated[StrictInt, Field(le=2**31 - 1)], Annotated[StrictInt, Field(le=2**31 - 1)]
    ] = Field(description="[first, last] training step (1-based, inclusive)", examples=[[10, 15]])
    replicas: list[Annotated[StrictInt, Field(ge=0, le=100_000)]] = Field(
        default_factory=lambda: [0],
        min_length=1,
        max_length=64,
        examples=[[0]],
        description="replica indexes to profile; default: the chief (replica 0)",
    )

    @field_validator("steps")
    @classmethod
    def _ordered(cls, value: tuple[int, int]) -> tuple[int, int]:
        first, last = value
        if first < 1 or last < first:
            raise ValueError("give [first, last] with 1 <= first <= last")
        return value

    @field_validator("replicas")
    @classmethod
    def _indexes(cls, value: list[int]) -> list[int]:
        if any(index < 0 for index in value):
            raise ValueError("replica indexes start at 0")
        return sorted(set(value))


class DistributionOptions(BaseModel):
    """The job's `distribution:` block: services/wire/replica.Distribution, as users
    write it (unknown keys refused, each named). Which options fit which strategy:
    services/jobs/strategies.py."""

    model_config = ConfigDict(extra="forbid")

    communication: Communication = Field(
        "auto",
        examples=["ring"],
        description="multi_worker_mirrored: auto|ring|nccl; mirrored: auto|nccl|"
        "hierarchical_copy|reduce_to_one; others: auto",
    )
    mixed_precision: MixedPrecision | None = Field(
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
    shard_policy: ShardPolicy = Field(
        "auto",
        examples=["data"],
        description="how tf.data shards the input across workers "
        "(file is refused for the built-in trainers)",
    )
    cpu_devices: StrictInt | None = Field(
        None,
        ge=1,
        le=64,
        examples=[2],
        description=("logical CPU devices of the process (mirrored, one_device)"),
    )
    devices_per_replica: StrictInt = Field(
        1, ge=1, le=64, examples=[1], description="model parallelism"
    )

    def wire(self) -> Distribution:
        """The options as the replica spec carries them."""
        return Distribution(**self.model_dump())


class JobCreate(BaseModel):
    """What a user submits: `POST /api/v1/jobs`."""

    model_config = ConfigDict(extra="forbid")

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
    env: dict[str, str] = Field(
        default_factory=dict,
        examples=[{"LOG_LEVEL": "debug"}],
        description="environment "
        "variables for the replicas (not TF_CONFIG, COHORT_*, AIP_*, LD_*, PYTHON*)",
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
        description="never; on_failure: any failed "
        "replica; exit_code: only a retryable exit code (e.g. 137, a lost node)",
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

    _name_chars = field_validator("name")(check_name)

    @field_validator("trainer")
    @classmethod
    def _trainer_shape(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if ":" in value and not _ENTRYPOINT.fullmatch(value):
            raise ValueError("an entrypoint must look like 'package.module:function'")
        if ":" not in value and not re.fullmatch(r"[a-z][a-z0-9_]*", value):
            raise ValueError("use a built-in trainer name such as 'mlp_digits'")
        return value

    @field_validator("bundle")
    @classmethod
    def _bundle_digest(cls, value: str | None) -> str | None:
        return None if value is None else "sha256:" + bundle_digest_hex(value)

    @field_validator("command")
    @classmethod
    def _command_argv(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else check_command(value)

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        return check_env(value)

    @field_validator("inputs")
    @classmethod
    def _input_names(cls, value: dict[str, str]) -> dict[str, str]:
        return check_inputs(value)

    @model_validator(mode="after")
    def _replicas_from_roles(self) -> JobCreate:
        # A parameter_server gang's size is its roles' sum; an explicit `replicas` that
        # differs is refused by services/jobs/strategies.py, naming the field.
        if self.roles is not None and "replicas" not in self.model_fields_set:
            self.replicas = self.roles.total
        return self

    @model_validator(mode="after")
    def _one_of_trainer_or_command(self) -> JobCreate:
        # `trainer` keeps its default (mlp_digits) for specs that name neither and carry
        # no code; with a command, or a bundle, the caller must say what runs.
        trainer_given = "trainer" in self.model_fields_set and self.trainer is not None
        if self.command is not None and trainer_given:
            raise ValueError("give either `trainer` or `command`, not both")
        if self.command is not None:
            self.trainer = None
        elif self.trainer is None or (self.bundle is not None and not trainer_given):
            raise ValueError(
                "give either `trainer` (module:function in the bundle) or "
                '`command` (argv, e.g. ["python", "train.py"])'
            )
        return self


class ReplicaRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    index: int
    attempt: int
    role: str = "worker"
    role_index: int = 0
    restarts: int = 0
    node_id: str
    address: str
    status: ReplicaStatus
    pid: int | None
    exit_code: int | None
    failure: str = ""
    tf_config: dict[str, Any] | None
    started_at: dt.datetime | None
    finished_at: dt.datetime | None


class JobProgress(BaseModel):
    """Where a job is, from its chief's stored steps."""

    step: int
    total_steps: int
    epoch: int
    epochs: int
    percent: float
    steps_per_second: float | None
    eta_seconds: float | None


class JobScaling(BaseModel):
    """A finished job's throughput, and its scaling against a 1-replica run of the same
    trainer at the same per-replica batch (services/telemetry/scaling.py)."""

    per_replica_examples_per_second: float | None = Field(
        None, description="mean over the replicas, from their step times"
    )
    total_examples_per_second: float | None = Field(None, description="sum over the replicas")
    baseline_job_id: int | None = Field(
        None, description="the 1-replica run compared with; null when there is none"
    )
    efficiency: float | None = Field(
        None, description="total examples/s / (replicas x the baseline's examples/s)"
    )
    note: str = Field("", description="what was compared, or why something is missing")


class JobRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    project: str
    name: str
    trainer: str | None
    command: list[str] | None = None
    bundle: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    inputs: dict[str, str] = Field(default_factory=dict)
    progress_timeout_seconds: int | None = None
    strategy: str
    replicas: int
    gpus_per_replica: int
    roles: dict[str, int] | None = None
    role_placement: dict[str, str] | None = None
    distribution: dict[str, Any] = Field(default_factory=dict)
    profile: dict[str, Any] | None = None
    hyperparameters: dict[str, Any]
    restart_policy: str
    max_restarts: int
    priority: int
    placement: str | None = None
    queue_position: int | None = Field(
        None,
        description="while queued: its place among its project's queued jobs, 1 for "
        "the project's next job to be placed, 2 behind it, ...",
    )
    cluster_queue_position: int | None = Field(
        None,
        description="while queued, to admin tokens only: its place among every "
        "project's queued jobs (priority, then submission)",
    )
    active_deadline_seconds: int | None = None
    ttl_seconds_after_finished: int | None = None
    schedule_id: int | None = Field(None, description="the schedule that fired this job")
    scheduled_for: dt.datetime | None = Field(None, description="the fire time it was made for")
    sweep_id: int | None = Field(None, description="the sweep this job is a trial of")
    trial_index: int | None = Field(None, description="its trial's index in the sweep")
    status: JobStatus
    attempt: int
    reason: str
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None

    @field_validator("project", mode="before")
    @classmethod
    def _project_name(cls, value: Any) -> Any:
        return getattr(value, "name", value)

    replica_list: list[ReplicaRead] = Field(
        default_factory=list, description="the replicas of the current attempt"
    )
    progress: JobProgress | None = Field(
        None,
        description="current step/epoch of the total, percent and ETA (one job: "
        "`GET /jobs/{id}` and the job stream's `status` events; not in lists)",
    )
    scaling: JobScaling | None = Field(
        None,
        description="once finished: examples/s per replica and in total, and the "
        "scaling efficiency against a 1-replica run (one job, as `progress`)",
    )


class JobList(BaseModel):
    items: list[JobRead]
    next_cursor: str | None


class JobEventRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    attempt: int
    from_status: JobStatus | None
    to_status: JobStatus
    reason: str
    created_at: dt.datetime


class MetricPointRead(BaseModel):
    attempt: int
    replica: int
    step: int
    epoch: int | None
    name: str
    value: float
    ts: float


class MetricList(BaseModel):
    items: list[MetricPointRead]
    last_id: int | None = Field(
        None,
        description="with max_points: the newest point's id before the read; the "
        "job's stream with kinds=metric&last_event_id=<last_id>.0.0 sends the points "
        "stored since (put a log line's id in the middle to go on from it as well)",
    )


class LogLineRead(BaseModel):
    id: int  # for resuming the stream after it: `Last-Event-ID: 0.<id>.0`
    attempt: int
    replica: int
    seq: int
    ts: float
    line: str


class LogList(BaseModel):
    items: list[LogLineRead]


class GpuRead(BaseModel):
    """One GPU a node offers, as its agent found it through NVML."""

    index: int = Field(description="the id replicas get in CUDA_VISIBLE_DEVICES (PCI order)")
    name: str = Field(
        "",
        description="the model, e.g. 'NVIDIA A100-SXM4-40GB'; "
        "empty where COHORT_NODE_GPUS named it",
    )
    memory_mb: int = Field(0, description="total memory, MiB (0: unknown)")


class NodeRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    address: str
    slots: int
    gpus: int
    free_slots: int
    running_replicas: int
    status: NodeStatus
    last_heartbeat: dt.datetime
    gpu_ids: list[int] = Field(default_factory=list)
    free_gpus: int = 0
    gpu_devices: list[GpuRead] = Field(default_factory=list)
    replicas: list[str] = Field(
        default_factory=list, description="live replicas here: 'job/attempt/index'"
    )
