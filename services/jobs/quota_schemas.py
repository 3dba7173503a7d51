"""Pydantic I/O schemas of a project's quota (`/api/v1/projects/{name}/quota`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

# Each limit, with what it caps (the same words the refusals and wait reasons use).
LIMITS: dict[str, str] = {
    "max_queued_jobs": "queued jobs",
    "max_running_replicas": "running replicas",
    "max_gpus": "GPUs in use",
    "max_schedules": "schedules",
    "max_priority": "priority",
}


class QuotaLimits(BaseModel):
    """Limits of one project: a number, or null."""

    max_queued_jobs: int | None = Field(
        None, ge=0, description="jobs waiting in the queue at once; one more is refused (429)"
    )
    max_running_replicas: int | None = Field(
        None, ge=0, description="replicas placed at once; a job past it waits in the queue"
    )
    max_gpus: int | None = Field(
        None, ge=0, description="GPUs held at once; a job past it waits in the queue"
    )
    max_schedules: int | None = Field(
        None, ge=0, description="retraining schedules; one more is refused (429)"
    )
    max_priority: int | None = Field(
        None,
        ge=-1000,
        le=1000,
        description="the highest `priority` a job may ask for; above it: 403",
    )


class QuotaUpdate(QuotaLimits):
    """`PUT /projects/{name}/quota`: the project's own limits, replacing the ones it had;
    a field left out or null takes the cluster's default (COHORT_QUOTA_*)."""

    model_config = ConfigDict(extra="forbid")


class QuotaUsage(BaseModel):
    """What the project holds now."""

    queued_jobs: int
    running_replicas: int
    gpus: int
    schedules: int


class QuotaRead(BaseModel):
    project: str
    limits: QuotaLimits = Field(description="the limits in force (null: no limit)")
    overrides: QuotaLimits = Field(
        description="the project's own limits set by an admin (null: the cluster's default)"
    )
    defaults: QuotaLimits = Field(description="the cluster's defaults (COHORT_QUOTA_*)")
    used: QuotaUsage
