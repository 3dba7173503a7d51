"""The REST/CLI views of jobs, derived from the job spec (services/jobs/spec.py), and the
I/O schemas of their replicas, events, metrics, logs and nodes."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    computed_field,
    field_serializer,
    field_validator,
    model_validator,
)

from services.jobs.spec import JobSpec
from services.jobs.spec_parts import Hyperparameters
from services.jobs.trainers import BUILTIN_TRAINERS
from services.statuses import JobStatus, NodeCordon, NodeStatus, ReplicaStatus
from services.storage.keys import bundle_digest_hex
from services.wire.policy import check_command, check_env, check_image, check_inputs
from services.wire.requirements import (
    RequirementRefused,
    normalise_requirements,
    package_count,
    requirements_digest,
)

_ENTRYPOINT = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_NAME = re.compile(r"^[\w.\- ]+$")


def check_name(value: str) -> str:
    """A job's or sweep's display name: letters, digits, spaces, '.', '_' or '-'."""
    if not _NAME.fullmatch(value):
        raise ValueError("use letters, digits, spaces, '.', '_' or '-'")
    return value


class JobCreate(JobSpec):
    """What a user submits: `POST /api/v1/jobs`."""

    model_config = ConfigDict(extra="forbid")

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

    @field_validator("image")
    @classmethod
    def _image_reference(cls, value: str | None) -> str | None:
        return None if value is None else check_image(value)

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        return check_env(value)

    @field_validator("pip")
    @classmethod
    def _requirement_lines(cls, value: list[str]) -> list[str]:
        try:
            return normalise_requirements(value, "pip", indexed=True)
        except RequirementRefused as exc:
            raise ValueError(str(exc)) from None

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
    preparing: str = Field(
        "", description="what its agent is doing before its start (installing its packages)"
    )
    tf_config: dict[str, Any] | None
    started_at: dt.datetime | None
    finished_at: dt.datetime | None


class JobProgress(BaseModel):
    """Where a job is, from its chief's stored steps. The totals, percent and ETA are
    known for the built-in trainers and a trainer whose job gave epochs and
    steps_per_epoch; a command (or another trainer) has only what it reported."""

    step: int = Field(description="the chief's latest step reported in this attempt")
    total_steps: int | None = Field(description="epochs x steps_per_epoch; null: unknown")
    epoch: int | None = Field(description="1-based; null when no point carried one")
    epochs: int | None = Field(description="null: unknown")
    percent: float | None = Field(description="of total_steps; null: unknown")
    steps_per_second: float | None
    eta_seconds: float | None = Field(description="null: unknown (no total, or no rate)")


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


class JobRead(JobSpec):
    """A job as stored: its spec, and what the control plane has written since."""

    # Every field is in every answer, so the answer's schema requires each of them.
    model_config = ConfigDict(
        from_attributes=True, json_schema_serialization_defaults_required=True
    )

    id: int
    project: str
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

    requirements: list[str] = Field(
        default_factory=list,
        description="what the job's environment installs: its `pip` lines or its bundle's "
        "requirements.txt, normalised; empty: the node's interpreter as it is",
    )

    @field_validator("requirements", mode="before")
    @classmethod
    def _requirement_lines(cls, value: Any) -> Any:
        # The column's text, one line each ("" or a row not yet flushed: none).
        if value is None:
            return []
        return value.splitlines() if isinstance(value, str) else value

    @computed_field(description="how many packages `requirements` names")  # type: ignore[prop-decorator]
    @property
    def requirements_count(self) -> int:
        return package_count(self.requirements)

    @computed_field(  # type: ignore[prop-decorator]
        description="sha256 of the normalised requirements: the environment's name on the "
        "nodes (empty: none)"
    )
    @property
    def requirements_digest(self) -> str:
        return requirements_digest(self.requirements)

    replica_list: list[ReplicaRead] = Field(
        default_factory=list, description="the replicas of the current attempt"
    )

    @field_serializer("hyperparameters")
    def _hyperparameters_as_stored(self, value: Hyperparameters) -> dict[str, Any]:
        # What the job runs with: a built-in trainer's knobs with their defaults, a
        # command's values as given, never defaults it did not ask for (spec.py).
        builtin = self.trainer in BUILTIN_TRAINERS
        return value.model_dump(mode="json", exclude_unset=not builtin)

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
    container_engine: str = Field(
        "", description="docker or podman: runs jobs with an `image`; empty: none"
    )
    cordon: NodeCordon | None = Field(
        None, description="drain or quarantine: takes no new replicas; null: takes them"
    )
    cordon_reason: str = Field("", description="why it is cordoned, and by whom")
    cordoned_at: dt.datetime | None = None


class NodeDrain(BaseModel):
    """A drain's reason, shown with the node's cordon (`cohort node list`, the Cluster page)."""

    model_config = ConfigDict(extra="forbid")
    reason: str = Field("", max_length=300, description="why the node is drained")
