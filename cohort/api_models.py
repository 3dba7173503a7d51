"""The API's request and response shapes, generated from its OpenAPI document by
deploy/sdk_models.py (do not edit: run `make sdk-models`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AwareDatetime, ConfigDict

from cohort.model_base import ApiModel


class AliasMoveRead(ApiModel):
    from_version: int | None
    moved_at: AwareDatetime
    moved_by: str
    reason: str
    to_version: int


class AliasRead(ApiModel):
    name: str
    updated_at: AwareDatetime
    updated_by: str
    version: int


class AliasUpdate(ApiModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    reason: str | None = ""
    version: int


class ArtifactRead(ApiModel):
    path: str
    sha256: str
    size: int


class AshaStopping(ApiModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    min_steps: int
    reduction_factor: int | None = 4
    rule: Literal["asha"]


class AttemptRead(ApiModel):
    answer: str
    duration_ms: int
    error: str
    started_at: AwareDatetime
    status_code: int | None


class BundleRead(ApiModel):
    created_at: AwareDatetime
    digest: str
    files: int
    size: int


class Choice(ApiModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    distribution: Literal["choice"]
    values: list[Any]


class DataRead(ApiModel):
    path: str
    sha256: str | None = None
    size: int


class DataTrigger(ApiModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    data: str
    settle_seconds: int | None = 30


class DataTriggerIn(ApiModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    data: str
    fire_on_existing: bool | None = False
    settle_seconds: int | None = 30


class DeliveryRead(ApiModel):
    attempts: list[AttemptRead]
    created_at: AwareDatetime
    event: str
    finished_at: AwareDatetime | None
    id: str
    next_attempt_at: AwareDatetime | None
    state: str


class DistributionOptions(ApiModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    communication: Literal["auto", "ring", "nccl", "hierarchical_copy", "reduce_to_one"] | None = (
        "auto"
    )
    cpu_devices: int | None = None
    devices_per_replica: int | None = 1
    gradient_accumulation_steps: int | None = 1
    mixed_precision: Literal["mixed_float16", "mixed_bfloat16"] | None = None
    shard_policy: Literal["auto", "file", "data", "off"] | None = "auto"


class Evaluate(ApiModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    command: list[str] | None = None
    data: str
    metric: str
    mode: Literal["max", "min"] | None = "max"


class EvaluationRead(ApiModel):
    created_at: AwareDatetime
    finished_at: AwareDatetime | None
    holdout_digest: str
    holdout_path: str
    job_id: int | None
    metric: str
    model_job_id: int | None
    reason: str
    status: str
    value: float | None


class FieldProblem(ApiModel):
    field: str
    message: str


class GpuRead(ApiModel):
    index: int
    memory_mb: int | None = 0
    name: str | None = ""


class HyperbandStopping(ApiModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    max_steps: int
    min_steps: int | None = 1
    reduction_factor: int | None = 3
    rule: Literal["hyperband"]


class Hyperparameters(ApiModel):
    model_config = ConfigDict(
        extra="allow",
    )
    batch_size: int | None = 32
    epochs: int | None = 5
    learning_rate: float | None = 0.01
    steps_per_epoch: int | None = 20


class InputLineage(ApiModel):
    digest: str | None = None
    name: str
    path: str


class IntRange(ApiModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    distribution: Literal["int"]
    high: int
    low: int


class JobProgress(ApiModel):
    epoch: int | None
    epochs: int | None
    eta_seconds: float | None
    percent: float | None
    step: int
    steps_per_second: float | None
    total_steps: int | None


class JobScaling(ApiModel):
    baseline_job_id: int | None = None
    efficiency: float | None = None
    note: str | None = ""
    per_replica_examples_per_second: float | None = None
    total_examples_per_second: float | None = None


class Lineage(ApiModel):
    attempt: int
    bundle: str | None = None
    command: list[str] | None = None
    finished_at: AwareDatetime | None = None
    hyperparameters: dict[str, Any] | None = None
    image: str | None = None
    inputs: list[InputLineage] | None = None
    job_id: int
    job_name: str
    metrics: dict[str, float] | None = None
    schedule_id: int | None = None
    schedule_name: str | None = None
    sweep_id: int | None = None
    trainer: str | None = None
    trial_index: int | None = None


class LogLineRead(ApiModel):
    attempt: int
    id: int
    line: str
    replica: int
    seq: int
    ts: float


class LogList(ApiModel):
    items: list[LogLineRead]


class LogUniform(ApiModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    distribution: Literal["log_uniform"]
    high: int | float
    low: int | float


class MedianStopping(ApiModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    min_steps: int | None = 1
    min_trials: int | None = 2
    rule: Literal["median"] = "median"


class MetricPointRead(ApiModel):
    attempt: int
    epoch: int | None
    name: str
    replica: int
    step: int
    ts: float
    value: float


class ModelSummary(ApiModel):
    aliases: list[AliasRead]
    created_at: AwareDatetime
    latest_version: int
    name: str
    updated_at: AwareDatetime


class NodeDrain(ApiModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    reason: str | None = ""


class Objective(ApiModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    metric: str
    mode: Literal["min", "max"]
    replica: int | None = 0
    value: Literal["last", "best"] | None = "last"


class ProfileRequest(ApiModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    replicas: list[int] | None = None
    steps: list[Any]


class PromotedModel(ApiModel):
    alias: str | None = ""
    artifact: str
    download_url: str
    job_id: int
    metric: str
    mode: str
    model: str | None = ""
    node_id: str
    path: str
    promoted_at: AwareDatetime | None
    schedule_id: int
    value: float | None
    version: int | None = None


class Promotion(ApiModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    alias: str | None = "production"
    metric: str | None = "eval_accuracy"
    mode: Literal["max", "min"] | None = "max"
    model: str | None = None


class QuotaLimits(ApiModel):
    max_gpus: int | None = None
    max_priority: int | None = None
    max_queued_jobs: int | None = None
    max_running_replicas: int | None = None
    max_schedules: int | None = None


class QuotaUpdate(ApiModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    max_gpus: int | None = None
    max_priority: int | None = None
    max_queued_jobs: int | None = None
    max_running_replicas: int | None = None
    max_schedules: int | None = None


class QuotaUsage(ApiModel):
    gpus: int
    queued_jobs: int
    running_replicas: int
    schedules: int


class RolePlacement(ApiModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    chief: Literal["any", "separate"] | None = "any"
    ps: Literal["any", "separate"] | None = "any"


class Roles(ApiModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    chief: int | None = 1
    evaluator: int | None = 0
    ps: int
    worker: int


class ScheduleRunRead(ApiModel):
    created_at: AwareDatetime
    data_version: str | None = None
    decided_at: AwareDatetime | None
    decision: str | None
    decision_reason: str
    evaluations: list[EvaluationRead] | None = None
    job_id: int | None
    metric_value: float | None
    outcome: str
    reason: str
    scheduled_for: AwareDatetime
    sweep_id: int | None = None


class TokenCreate(ApiModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    expires_at: AwareDatetime | None = None
    expires_in: int | None = None
    name: str
    project: str | None = "default"
    scopes: list[Literal["read", "submit", "schedules", "admin"]]


class TokenCreated(ApiModel):
    bootstrap: bool
    created_at: AwareDatetime
    expires_at: AwareDatetime | None
    id: int
    last_used_at: AwareDatetime | None
    name: str
    project: str
    revoked_at: AwareDatetime | None
    scopes: list[str]
    state: Literal["active", "expired", "revoked"]
    token: str


class TokenRead(ApiModel):
    bootstrap: bool
    created_at: AwareDatetime
    expires_at: AwareDatetime | None
    id: int
    last_used_at: AwareDatetime | None
    name: str
    project: str
    revoked_at: AwareDatetime | None
    scopes: list[str]
    state: Literal["active", "expired", "revoked"]


class TrackingSettings(ApiModel):
    experiment: str | None = None
    tracking_uri: str | None = None


class TrackingUpdate(ApiModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    experiment: str | None = None
    tracking_uri: str | None = None


class TrialRead(ApiModel):
    attempt: int
    created_at: AwareDatetime
    finished_at: AwareDatetime | None
    index: int
    job_id: int
    name: str
    objective_value: float | None = None
    parameters: dict[str, Any]
    reason: str
    started_at: AwareDatetime | None
    status: Literal[
        "queued",
        "scheduled",
        "running",
        "restarting",
        "succeeded",
        "failed",
        "cancelled",
    ]
    stopped_early: bool | None = False


class Uniform(ApiModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    distribution: Literal["uniform"]
    high: int | float
    low: int | float


class VersionCreate(ApiModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    job_id: int


class VersionRead(ApiModel):
    aliases: list[str] | None = None
    artifact: str
    evaluations: list[EvaluationRead] | None = None
    job_id: int | None
    lineage: Lineage
    model: str
    registered_at: AwareDatetime
    registered_by: str
    version: int


class WebhookCreate(ApiModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    events: list[
        Literal[
            "job.succeeded",
            "job.failed",
            "job.cancelled",
            "sweep.ended",
            "schedule.fired",
            "model.version_registered",
            "model.alias_moved",
        ]
    ]
    note: str | None = ""
    url: str


class WebhookCreated(ApiModel):
    created_at: AwareDatetime
    events: list[str]
    failed: int
    id: int
    note: str
    pending: int
    project: str
    secret: str
    url: str


class WebhookRead(ApiModel):
    created_at: AwareDatetime
    events: list[str]
    failed: int
    id: int
    note: str
    pending: int
    project: str
    url: str


class AliasHistory(ApiModel):
    alias: str
    items: list[AliasMoveRead]
    model: str


class ArtifactList(ApiModel):
    items: list[ArtifactRead]


class DataList(ApiModel):
    items: list[DataRead]


class DeliveryList(ApiModel):
    items: list[DeliveryRead]


class ErrorBody(ApiModel):
    error: str
    fields: list[FieldProblem] | None = None
    message: str


class JobCreate(ApiModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    active_deadline_seconds: int | None = None
    bundle: str | None = None
    command: list[str] | None = None
    distribution: DistributionOptions | None = None
    env: dict[str, str] | None = None
    gpus_per_replica: int | None = 0
    hyperparameters: Hyperparameters | None = None
    image: str | None = None
    inputs: dict[str, str] | None = None
    max_restarts: int | None = 0
    name: str | None = "job"
    pip: list[str] | None = None
    placement: Literal["pack", "spread"] | None = None
    priority: int | None = 0
    profile: ProfileRequest | None = None
    progress_timeout_seconds: int | None = None
    replicas: int | None = 2
    restart_policy: Literal["never", "on_failure", "exit_code"] | None = "never"
    role_placement: RolePlacement | None = None
    roles: Roles | None = None
    strategy: (
        Literal["multi_worker_mirrored", "mirrored", "one_device", "parameter_server"] | None
    ) = "multi_worker_mirrored"
    trainer: str | None = "mlp_digits"
    ttl_seconds_after_finished: int | None = None


class JobEventRead(ApiModel):
    attempt: int
    created_at: AwareDatetime
    from_status: (
        Literal[
            "queued",
            "scheduled",
            "running",
            "restarting",
            "succeeded",
            "failed",
            "cancelled",
        ]
        | None
    )
    reason: str
    to_status: Literal[
        "queued",
        "scheduled",
        "running",
        "restarting",
        "succeeded",
        "failed",
        "cancelled",
    ]


class JobSpec(ApiModel):
    active_deadline_seconds: int | None = None
    bundle: str | None = None
    command: list[str] | None = None
    distribution: DistributionOptions | None = None
    env: dict[str, str] | None = None
    gpus_per_replica: int | None = 0
    hyperparameters: Hyperparameters | None = None
    image: str | None = None
    inputs: dict[str, str] | None = None
    max_restarts: int | None = 0
    name: str | None = "job"
    pip: list[str] | None = None
    placement: Literal["pack", "spread"] | None = None
    priority: int | None = 0
    profile: ProfileRequest | None = None
    progress_timeout_seconds: int | None = None
    replicas: int | None = 2
    restart_policy: Literal["never", "on_failure", "exit_code"] | None = "never"
    role_placement: RolePlacement | None = None
    roles: Roles | None = None
    strategy: (
        Literal["multi_worker_mirrored", "mirrored", "one_device", "parameter_server"] | None
    ) = "multi_worker_mirrored"
    trainer: str | None = "mlp_digits"
    ttl_seconds_after_finished: int | None = None


class MetricList(ApiModel):
    items: list[MetricPointRead]
    last_id: int | None = None


class ModelList(ApiModel):
    items: list[ModelSummary]


class ModelRead(ApiModel):
    aliases: list[AliasRead]
    created_at: AwareDatetime
    latest_version: int
    name: str
    updated_at: AwareDatetime
    versions: list[VersionRead]


class NodeRead(ApiModel):
    address: str
    container_engine: str | None = ""
    cordon: Literal["drain", "quarantine"] | None = None
    cordon_reason: str | None = ""
    cordoned_at: AwareDatetime | None = None
    free_gpus: int | None = 0
    free_slots: int
    gpu_devices: list[GpuRead] | None = None
    gpu_ids: list[int] | None = None
    gpus: int
    id: str
    last_heartbeat: AwareDatetime
    replicas: list[str] | None = None
    running_replicas: int
    slots: int
    status: Literal["ready", "lost", "pending"]


class QuotaRead(ApiModel):
    defaults: QuotaLimits
    limits: QuotaLimits
    overrides: QuotaLimits
    project: str
    used: QuotaUsage


class ReplicaRead(ApiModel):
    address: str
    attempt: int
    exit_code: int | None
    failure: str | None = ""
    finished_at: AwareDatetime | None
    index: int
    node_id: str
    pid: int | None
    preparing: str | None = ""
    restarts: int | None = 0
    role: str | None = "worker"
    role_index: int | None = 0
    started_at: AwareDatetime | None
    status: Literal["pending", "running", "succeeded", "failed", "stopped", "lost"]
    tf_config: dict[str, Any] | None


class ScheduleRead(ApiModel):
    concurrency_policy: str
    created_at: AwareDatetime
    cron: str | None
    data_version: str | None = None
    data_version_at: AwareDatetime | None = None
    evaluate: Evaluate | None = None
    failed_jobs_history_limit: int | None
    id: int
    interval_seconds: int | None
    job: dict[str, Any]
    last_fired_at: AwareDatetime | None
    last_outcome: str
    name: str
    next_fire_at: AwareDatetime | None
    paused: bool
    project: str
    promote: Promotion | None
    promoted_job_id: int | None
    promoted_value: float | None
    recent_runs: list[ScheduleRunRead] | None = None
    starting_deadline_seconds: int | None
    successful_jobs_history_limit: int | None
    sweep: dict[str, Any] | None = None
    timezone: str
    trigger: DataTrigger | None = None


class SearchSpace(ApiModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    grid: dict[str, list[Any]] | None = None
    random: dict[str, Uniform | LogUniform | IntRange | Choice] | None = None
    seed: int | None = None


class SweepCreate(ApiModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    algorithm: Literal["grid", "random", "tpe", "cmaes"] | None = None
    early_stopping: MedianStopping | AshaStopping | HyperbandStopping | None = None
    max_concurrent: int | None = 1
    name: str | None = "sweep"
    objective: Objective
    space: SearchSpace
    template: JobCreate
    trials: int | None = None


class SweepRead(ApiModel):
    algorithm: Literal["grid", "random", "tpe", "cmaes"]
    best_job_id: int | None = None
    best_parameters: dict[str, Any] | None = None
    best_value: float | None
    created_at: AwareDatetime
    early_stopping: MedianStopping | AshaStopping | HyperbandStopping | None
    finished_at: AwareDatetime | None
    id: int
    max_concurrent: int
    name: str
    objective: Objective
    project: str
    reason: str
    schedule_id: int | None = None
    scheduled_for: AwareDatetime | None = None
    seed: int | None = None
    space: dict[str, Any]
    status: Literal["running", "succeeded", "failed", "cancelled"]
    template: dict[str, Any]
    trial_counts: dict[str, int] | None = None
    trials: list[TrialRead] | None = None
    trials_created: int
    trials_total: int


class TokenList(ApiModel):
    items: list[TokenRead]


class TrackingRead(ApiModel):
    default_tracking_uri: str
    experiment: str
    overrides: TrackingSettings
    project: str
    tracking_uri: str


class WebhookList(ApiModel):
    items: list[WebhookRead]


class JobRead(ApiModel):
    active_deadline_seconds: int | None
    attempt: int
    bundle: str | None
    cluster_queue_position: int | None
    command: list[str] | None
    created_at: AwareDatetime
    distribution: DistributionOptions
    env: dict[str, str]
    finished_at: AwareDatetime | None
    gpus_per_replica: int
    hyperparameters: dict[str, Any]
    id: int
    image: str | None
    inputs: dict[str, str]
    max_restarts: int
    name: str
    pip: list[str]
    placement: Literal["pack", "spread"] | None
    priority: int
    profile: ProfileRequest | None
    progress: JobProgress | None
    progress_timeout_seconds: int | None
    project: str
    queue_position: int | None
    reason: str
    replica_list: list[ReplicaRead]
    replicas: int
    requirements: list[str]
    requirements_count: int
    requirements_digest: str
    restart_policy: Literal["never", "on_failure", "exit_code"]
    role_placement: RolePlacement | None
    roles: Roles | None
    scaling: JobScaling | None
    schedule_id: int | None
    scheduled_for: AwareDatetime | None
    started_at: AwareDatetime | None
    status: Literal[
        "queued",
        "scheduled",
        "running",
        "restarting",
        "succeeded",
        "failed",
        "cancelled",
    ]
    strategy: Literal["multi_worker_mirrored", "mirrored", "one_device", "parameter_server"]
    sweep_id: int | None
    trainer: str | None
    trial_index: int | None
    ttl_seconds_after_finished: int | None


class ScheduleCreate(ApiModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    concurrency_policy: Literal["allow", "forbid", "replace"] | None = "allow"
    cron: str | None = None
    evaluate: Evaluate | None = None
    failed_jobs_history_limit: int | None = None
    interval_seconds: int | None = None
    job: JobCreate | None = None
    name: str
    paused: bool | None = False
    promote: Promotion | None = None
    starting_deadline_seconds: int | None = None
    successful_jobs_history_limit: int | None = None
    sweep: SweepCreate | None = None
    timezone: str | None = "UTC"
    trigger: DataTriggerIn | None = None


class ScheduleList(ApiModel):
    items: list[ScheduleRead]


class ScheduleUpdate(ApiModel):
    model_config = ConfigDict(
        extra="forbid",
    )
    concurrency_policy: Literal["allow", "forbid", "replace"] | None = None
    cron: str | None = None
    evaluate: Evaluate | None = None
    failed_jobs_history_limit: int | None = None
    interval_seconds: int | None = None
    job: JobCreate | None = None
    promote: Promotion | None = None
    starting_deadline_seconds: int | None = None
    successful_jobs_history_limit: int | None = None
    sweep: SweepCreate | None = None
    timezone: str | None = None
    trigger: DataTriggerIn | None = None


class SweepList(ApiModel):
    items: list[SweepRead]
    next_cursor: str | None


class JobList(ApiModel):
    items: list[JobRead]
    next_cursor: str | None
