"""Pydantic schemas of what the API answers about retraining schedules: a schedule, its
runs with their evaluations (EvaluationRead: the registry's, which shows them on versions
too), and its promoted model."""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel, ConfigDict, Field

from services.registry.schemas import EvaluationRead
from services.retraining.schemas import Evaluate, Promotion
from services.retraining.trigger_schemas import TriggerView


class ScheduleRunRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    scheduled_for: dt.datetime
    job_id: int | None
    sweep_id: int | None = None
    data_version: str | None = Field(None, description="the data content it was for (a digest)")
    outcome: str
    reason: str
    decision: str | None
    metric_value: float | None
    decision_reason: str
    created_at: dt.datetime
    decided_at: dt.datetime | None
    evaluations: list[EvaluationRead] = Field(
        default_factory=list, description="the evaluations this run's decision asked for"
    )


class ScheduleRead(TriggerView):
    id: int
    project: str
    name: str
    job: dict[str, object] = Field(description="the job template ({} when it fires a sweep)")
    sweep: dict[str, object] | None = Field(None, description="the sweep template, if any")
    cron: str | None
    interval_seconds: int | None
    timezone: str
    concurrency_policy: str
    starting_deadline_seconds: int | None
    successful_jobs_history_limit: int | None
    failed_jobs_history_limit: int | None
    promote: Promotion | None
    evaluate: Evaluate | None = None
    paused: bool
    next_fire_at: dt.datetime | None
    last_fired_at: dt.datetime | None
    last_outcome: str
    promoted_job_id: int | None
    promoted_value: float | None
    created_at: dt.datetime
    recent_runs: list[ScheduleRunRead] = Field(default_factory=list)


class ScheduleList(BaseModel):
    items: list[ScheduleRead]


class PromotedModel(BaseModel):
    """The promoted model of a schedule: the version its alias points at in the registry,
    the job that made it and where to fetch it (the artifact store's prefix and the
    download URL); node_id and path say where the chief wrote it, which matters only to an
    operator of that node."""

    schedule_id: int
    model: str = Field("", description="the registry model (promote.model)")
    alias: str = Field("", description="its alias that the schedule moves (promote.alias)")
    version: int | None = Field(None, description="the version the alias points at")
    job_id: int
    metric: str
    mode: str
    value: float | None = Field(
        description="the version's last `metric` (None: it reported none, e.g. a version "
        "the alias was moved to by hand)"
    )
    node_id: str
    path: str = Field(description="on node_id, under its DATA_DIR: jobs/<id>/model")
    artifact: str = Field(
        description="the model's prefix in the artifact store: "
        "jobs/<id>/model (GET /api/v1/jobs/<id>/artifacts lists its files)"
    )
    download_url: str = Field(
        description="GET it (with the token) for the model as a "
        ".tar.gz; `cohort artifact download <job_id> model` does the same"
    )
    promoted_at: dt.datetime | None
