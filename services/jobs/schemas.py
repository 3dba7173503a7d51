"""Pydantic I/O schemas shared by the REST API, the CLI and the services."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    field_validator,
    model_validator,
)

from services.statuses import JobStatus, NodeStatus, ReplicaStatus

Strategy = Literal["multi_worker_mirrored", "mirrored", "one_device"]
RestartPolicy = Literal["never", "on_failure", "exit_code"]
Placement = Literal["pack", "spread"]

_ENTRYPOINT = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_NAME = re.compile(r"^[\w.\- ]+$")


class Hyperparameters(BaseModel):
    """Training knobs every built-in trainer honours, plus trainer-specific extras."""

    model_config = ConfigDict(extra="allow")

    epochs: StrictInt = Field(5, ge=1, le=100_000)
    steps_per_epoch: StrictInt = Field(20, ge=1, le=10_000_000)
    batch_size: StrictInt = Field(32, ge=1, le=65_536, description="per replica")
    learning_rate: float = Field(0.01, gt=0, le=10, strict=True)

    @model_validator(mode="after")
    def _extras_are_plain(self) -> Hyperparameters:
        # Trainer-specific extras must be plain numbers, booleans or short strings:
        # they end up in a child process's environment as JSON.
        for key, value in (self.model_extra or {}).items():
            if not re.fullmatch(r"[A-Za-z_]\w{0,63}", key):
                raise ValueError(f"hyperparameter name {key!r} must be an identifier")
            if not isinstance(value, bool | int | float | str) or (
                isinstance(value, str) and len(value) > 256
            ):
                raise ValueError(
                    f"hyperparameter {key!r} must be a number, a boolean or a short string"
                )
        return self


class JobCreate(BaseModel):
    """What a user submits: `POST /api/v1/jobs`."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("job", min_length=1, max_length=128)
    trainer: str = Field("mlp_digits", min_length=1, max_length=256)
    strategy: Strategy = "multi_worker_mirrored"
    replicas: StrictInt = Field(2, ge=1)
    gpus_per_replica: StrictInt = Field(0, ge=0, le=16)
    hyperparameters: Hyperparameters = Field(default_factory=Hyperparameters)
    restart_policy: RestartPolicy = "never"
    max_restarts: StrictInt = Field(0, ge=0, le=100)
    priority: StrictInt = Field(0, ge=-1000, le=1000)
    placement: Placement | None = Field(
        None, description="pack: fewest nodes; spread: one replica per node where it can; "
        "unset: the cluster's default")
    active_deadline_seconds: StrictInt | None = Field(None, ge=1, le=90 * 86400)
    ttl_seconds_after_finished: StrictInt | None = Field(None, ge=0, le=365 * 86400)

    @field_validator("name")
    @classmethod
    def _name_chars(cls, value: str) -> str:
        if not _NAME.fullmatch(value):
            raise ValueError("use letters, digits, spaces, '.', '_' or '-'")
        return value

    @field_validator("trainer")
    @classmethod
    def _trainer_shape(cls, value: str) -> str:
        if ":" in value and not _ENTRYPOINT.fullmatch(value):
            raise ValueError("an entrypoint must look like 'package.module:function'")
        if ":" not in value and not re.fullmatch(r"[a-z][a-z0-9_]*", value):
            raise ValueError("use a built-in trainer name such as 'mlp_digits'")
        return value


class ReplicaRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    index: int
    attempt: int
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


class JobRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    project: str
    name: str
    trainer: str
    strategy: str
    replicas: int
    gpus_per_replica: int
    hyperparameters: dict[str, Any]
    restart_policy: str
    max_restarts: int
    priority: int
    placement: str | None = None
    queue_position: int | None = Field(
        None, description="while queued: 1 for the next job to be placed, 2 behind it, ...")
    active_deadline_seconds: int | None = None
    ttl_seconds_after_finished: int | None = None
    schedule_id: int | None = Field(None, description="the schedule that fired this job")
    scheduled_for: dt.datetime | None = Field(None, description="the fire time it was made for")
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
        None, description="current step/epoch of the total, percent and ETA (one job: "
        "`GET /jobs/{id}` and the job stream's `status` events; not in lists)"
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
        None, description="with max_points: the newest point's id before the read; the "
        "job's stream with kinds=metric&last_event_id=<last_id>.0.0 sends the points "
        "stored since (put a log line's id in the middle to go on from it as well)")


class LogLineRead(BaseModel):
    id: int  # for resuming the stream after it: `Last-Event-ID: 0.<id>.0`
    attempt: int
    replica: int
    seq: int
    ts: float
    line: str


class LogList(BaseModel):
    items: list[LogLineRead]


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
    replicas: list[str] = Field(default_factory=list,
                                description="live replicas here: 'job/attempt/index'")

