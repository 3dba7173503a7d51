"""Pydantic schemas of what a user gives for a retraining schedule: create, update, and
their blocks (promote, evaluate). What the API answers is read_schemas.py's."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator

from services.jobs.schemas import JobCreate
from services.registry.names import (
    ALIAS_NAME,
    ALIAS_NAME_RULE,
    DEFAULT_ALIAS,
    MODEL_NAME,
    MODEL_NAME_RULE,
)
from services.retraining.cron import InvalidCron, load_zone, parse_cron
from services.retraining.trigger_schemas import TriggerSpec, check_when
from services.storage.keys import DATA_PREFIX, InvalidKey, check_data_path
from services.sweeps.schemas import SweepCreate
from services.wire.policy import check_command

ConcurrencyPolicy = Literal["allow", "forbid", "replace"]
_NAME = re.compile(r"^[A-Za-z0-9][\w.\-]*$")
_METRIC = re.compile(r"^[A-Za-z_][\w./-]{0,63}$")
MAX_INTERVAL = 366 * 24 * 3600


class Promotion(BaseModel):
    """Promote a run's model only when its metric beats the promoted one's."""

    model_config = ConfigDict(extra="forbid")

    metric: str = Field(
        "eval_accuracy",
        examples=["eval_accuracy"],
        description="metric name, replica 0, last value",
    )
    mode: Literal["max", "min"] = Field(
        "max", examples=["max"], description="max: higher is better"
    )

    model: str | None = Field(
        None,
        max_length=64,
        examples=["digits"],
        description="the registry model a promoted run becomes a version of "
        "(default: the schedule's name)",
    )
    alias: str = Field(
        DEFAULT_ALIAS,
        max_length=64,
        examples=["production"],
        description="the model's alias moved to a promoted version",
    )

    @field_validator("metric")
    @classmethod
    def _metric_name(cls, value: str) -> str:
        if not _METRIC.fullmatch(value):
            raise ValueError("use a metric name such as 'eval_accuracy'")
        return value

    @field_validator("model")
    @classmethod
    def _model_name(cls, value: str | None) -> str | None:
        if value is not None and not MODEL_NAME.fullmatch(value):
            raise ValueError(f"use {MODEL_NAME_RULE}")
        return value

    @field_validator("alias")
    @classmethod
    def _alias_name(cls, value: str) -> str:
        if not ALIAS_NAME.fullmatch(value):
            raise ValueError(f"use {ALIAS_NAME_RULE}")
        return value


class Evaluate(BaseModel):
    """Champion against challenger: each new model, and the promoted one when the
    holdout changed, is evaluated on one holdout; the better value there is promoted."""

    model_config = ConfigDict(extra="forbid")

    data: str = Field(
        max_length=905,
        examples=["data/digits/holdout"],
        description='the holdout: a file or prefix of the project\'s data, "data/<path>"',
    )
    metric: str = Field(
        examples=["accuracy"], description="the metric the evaluation reports (replica 0, last)"
    )
    mode: Literal["max", "min"] = Field(
        "max", examples=["max"], description="max: higher is better"
    )
    command: list[str] | None = Field(
        None,
        min_length=1,
        examples=[["python", "evaluate.py"]],
        description="command jobs: argv run in the job's bundle/image with COHORT_MODEL_DIR "
        "and COHORT_HOLDOUT_DIR; unset: the trainer module's evaluate(ctx)",
    )

    @field_validator("data")
    @classmethod
    def _data_path(cls, value: str) -> str:
        path = value.removeprefix(f"{DATA_PREFIX}/")
        if path == value:
            raise ValueError("name the project's data as 'data/<path>', e.g. 'data/digits/holdout'")
        try:
            check_data_path(path)
        except InvalidKey as exc:
            raise ValueError(str(exc)) from exc
        return value

    @field_validator("metric")
    @classmethod
    def _metric_name(cls, value: str) -> str:
        if not _METRIC.fullmatch(value):
            raise ValueError("use a metric name such as 'accuracy'")
        return value

    @field_validator("command")
    @classmethod
    def _command_argv(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else check_command(value)


def _check_cron(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return parse_cron(value).expression
    except InvalidCron as exc:
        raise ValueError(str(exc)) from exc


def _check_zone(value: str) -> str:
    try:
        load_zone(value)
    except InvalidCron as exc:
        raise ValueError(str(exc)) from exc
    return value


class _Timing(TriggerSpec):
    cron: str | None = Field(
        None,
        max_length=128,
        examples=["0 3 * * *"],
        description="5 fields, or 6 with seconds first; give this or interval_seconds",
    )
    interval_seconds: StrictInt | None = Field(
        None,
        ge=1,
        le=MAX_INTERVAL,
        examples=[3600],
        description="fire every this many seconds; give this or cron",
    )
    timezone: str | None = Field(
        None, max_length=64, examples=["Europe/Berlin"], description="IANA zone, e.g. Europe/Berlin"
    )
    concurrency_policy: ConcurrencyPolicy | None = Field(
        None,
        examples=["forbid"],
        description="when a fire finds the last run unfinished: "
        "allow (run both), forbid (skip this one), replace (cancel the last)",
    )
    starting_deadline_seconds: StrictInt | None = Field(
        None,
        ge=1,
        le=MAX_INTERVAL,
        examples=[300],
        description="a fire missed by more than this (the scheduler was down) is skipped",
    )
    successful_jobs_history_limit: StrictInt | None = Field(
        None,
        ge=0,
        le=10_000,
        examples=[3],
        description="succeeded jobs of the schedule kept; "
        "older ones are deleted (their runs stay recorded)",
    )
    failed_jobs_history_limit: StrictInt | None = Field(
        None,
        ge=0,
        le=10_000,
        examples=[1],
        description="failed jobs of the schedule kept; "
        "older ones are deleted (their runs stay recorded)",
    )
    promote: Promotion | None = Field(
        None,
        examples=[{"metric": "eval_accuracy", "mode": "max"}],
        description="promote a run's model only when its metric beats the promoted one's",
    )
    evaluate: Evaluate | None = Field(
        None,
        examples=[{"data": "data/digits/holdout", "metric": "accuracy", "mode": "max"}],
        description="judge each new model against the promoted one on this holdout "
        "(evaluation jobs) instead of on its training metric; implies promotion",
    )

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        return _check_cron(value)

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str | None) -> str | None:
        return None if value is None else _check_zone(value)


class ScheduleCreate(_Timing):
    """`POST /api/v1/schedules`: a job template fired on a cron expression or an interval."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        min_length=1,
        max_length=64,
        examples=["nightly-digits"],
        description="unique in the project: a letter or digit, then letters, digits, '.', '_', '-'",
    )
    job: JobCreate | None = Field(
        None,
        examples=[{"trainer": "mlp_digits", "replicas": 2}],
        description="the same spec as POST /api/v1/jobs",
    )
    sweep: SweepCreate | None = Field(
        None,
        examples=[None],
        description="fire a sweep instead of a job: the same spec as "
        "POST /api/v1/sweeps (its name is the run's); promotion considers its best trial",
    )
    timezone: str = Field(
        "UTC",
        max_length=64,
        examples=["Europe/Berlin"],
        description="IANA zone, e.g. Europe/Berlin",
    )
    concurrency_policy: ConcurrencyPolicy = Field(
        "allow",
        examples=["forbid"],
        description="when a fire finds the last run "
        "unfinished: allow (run both), forbid (skip this one), replace (cancel the last)",
    )
    paused: bool = Field(
        False, examples=[False], description="created paused: fires only once resumed"
    )

    @field_validator("name")
    @classmethod
    def _name_chars(cls, value: str) -> str:
        if not _NAME.fullmatch(value):
            raise ValueError("start with a letter or digit; then letters, digits, '.', '_', '-'")
        return value

    @model_validator(mode="after")
    def _one_timing(self) -> ScheduleCreate:
        check_when(self.cron, self.interval_seconds, self.trigger)
        if (self.job is None) == (self.sweep is None):
            raise ValueError("give exactly one of 'job' and 'sweep'")
        return self


class ScheduleUpdate(_Timing):
    """`PATCH /api/v1/schedules/{id}`: the fields given replace the stored ones."""

    model_config = ConfigDict(extra="forbid")

    job: JobCreate | None = Field(
        None,
        examples=[{"trainer": "cnn_digits"}],
        description="a new job template (replaces the stored one)",
    )
    sweep: SweepCreate | None = Field(
        None, examples=[None], description="a new sweep template (replaces the stored one)"
    )

    @model_validator(mode="after")
    def _one_timing(self) -> ScheduleUpdate:
        if self.cron is not None and self.interval_seconds is not None:
            raise ValueError("give at most one of 'cron' and 'interval_seconds'")
        if self.job is not None and self.sweep is not None:
            raise ValueError("give at most one of 'job' and 'sweep'")
        return self
