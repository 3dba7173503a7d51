"""Pydantic I/O schemas of the model registry: a version's lineage, versions, aliases and
their history, models (what REST answers, the CLI prints and versions store as lineage)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt

from services.db import MAX_SQL_INT


class InputLineage(BaseModel):
    """One input of the job: the local name it was given, the data it named, and the
    content digest of that data when it was registered (None: not known)."""

    name: str = Field(description="the input's local file name in the replicas")
    path: str = Field(description="data/<path> of the project's data")
    digest: str | None = Field(
        None, description="sha256:<hex> of the data's content when the version was registered"
    )


class Lineage(BaseModel):
    """Where a version came from, copied from its job when it was registered: it stays
    when the job is gone."""

    job_id: int
    job_name: str
    attempt: int = Field(description="the job's attempt whose model and metrics these are")
    trainer: str | None = Field(None, description="the built-in trainer or module:function")
    command: list[str] | None = Field(None, description="the job's command, if it ran one")
    image: str | None = Field(None, description="the container image it ran in, if any")
    bundle: str | None = Field(None, description="sha256:<hex> of the job's code bundle")
    inputs: list[InputLineage] = Field(default_factory=list)
    hyperparameters: dict[str, Any] = Field(default_factory=dict)
    metrics: dict[str, float] = Field(
        default_factory=dict,
        description="the last value of each metric, replica 0, the attempt above",
    )
    schedule_id: int | None = Field(None, description="the schedule that fired the job")
    schedule_name: str | None = None
    sweep_id: int | None = Field(None, description="the sweep the job was a trial of")
    trial_index: int | None = None
    finished_at: dt.datetime | None = None


class VersionCreate(BaseModel):
    """`POST /api/v1/models/{name}/versions`: register a succeeded job's model."""

    model_config = ConfigDict(extra="forbid")

    job_id: StrictInt = Field(
        ge=1,
        le=MAX_SQL_INT,
        examples=[42],
        description="a succeeded job of the project that saved a model",
    )


class EvaluationRead(BaseModel):
    """One model evaluated on one content of the schedule's holdout."""

    model_config = ConfigDict(from_attributes=True)

    model_job_id: int | None = Field(description="the job whose model was evaluated")
    job_id: int | None = Field(description="the evaluation job")
    holdout_path: str
    holdout_digest: str = Field(description="sha256 of the holdout's content it ran on")
    metric: str
    value: float | None
    status: str = Field(description="running, succeeded or failed")
    reason: str
    created_at: dt.datetime
    finished_at: dt.datetime | None


class VersionRead(BaseModel):
    model: str
    version: int
    job_id: int | None = Field(description="None once the job is gone (the lineage stays)")
    artifact: str = Field(description="the model's prefix in the artifact store")
    lineage: Lineage
    aliases: list[str] = Field(default_factory=list, description="the aliases on it now")
    registered_by: str = Field(description="the token (by name) or schedule that registered it")
    registered_at: dt.datetime
    evaluations: list[EvaluationRead] = Field(
        default_factory=list,
        description="its evaluations on schedules' holdouts (evaluate:), oldest first",
    )


class AliasUpdate(BaseModel):
    """`PUT /api/v1/models/{name}/aliases/{alias}`: point the alias at a version."""

    model_config = ConfigDict(extra="forbid")

    version: StrictInt = Field(
        ge=1, le=MAX_SQL_INT, examples=[3], description="a version of the model"
    )
    reason: str = Field(
        "",
        max_length=1000,
        examples=["rollback: v3 mislabels class 7"],
        description="kept in the alias's history",
    )


class AliasRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    name: str
    version: int
    updated_by: str
    updated_at: dt.datetime


class AliasMoveRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    from_version: int | None = Field(description="None: the alias was created by this move")
    to_version: int
    moved_by: str = Field(description="the token (by name) or schedule that moved it")
    reason: str
    moved_at: dt.datetime


class AliasHistory(BaseModel):
    model: str
    alias: str
    items: list[AliasMoveRead] = Field(description="every move, newest first")


class ModelSummary(BaseModel):
    name: str
    latest_version: int
    aliases: list[AliasRead]
    created_at: dt.datetime
    updated_at: dt.datetime


class ModelList(BaseModel):
    items: list[ModelSummary]


class ModelRead(ModelSummary):
    versions: list[VersionRead] = Field(description="newest first")
