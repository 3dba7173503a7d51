"""Pydantic I/O schemas of a project's MLflow settings (`/api/v1/projects/{name}/mlflow`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from services.settings import TRACKING_URI_PATTERN, tracking_uri_problem


class TrackingSettings(BaseModel):
    """A project's own MLflow settings; null takes the cluster's."""

    tracking_uri: str | None = Field(
        None,
        max_length=1024,
        # What tracking_uri_problem accepts, said in the OpenAPI document too.
        pattern=TRACKING_URI_PATTERN,
        description="the MLflow server its jobs become runs on (http(s)://host[:port], or "
        "databricks); \"\": none, whatever the cluster's; null: the cluster's "
        "(COHORT_MLFLOW_TRACKING_URI)",
        examples=["http://mlflow.internal:5000"],
    )
    experiment: str | None = Field(
        None,
        min_length=1,
        max_length=256,
        description="the MLflow experiment of its runs; null: the project's name",
    )


class TrackingUpdate(TrackingSettings):
    """`PUT /projects/{name}/mlflow`: the project's own settings, replacing the ones it had.
    Jobs submitted from then on are exported there; a job already exported stays on the
    server it started on."""

    model_config = ConfigDict(extra="forbid")

    # Before the schema's pattern: a refusal says what an address looks like.
    @field_validator("tracking_uri", mode="before")
    @classmethod
    def _an_mlflow_server(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        problem = tracking_uri_problem(value)
        if problem:
            raise ValueError(problem)
        return value.strip()


class TrackingRead(BaseModel):
    project: str
    tracking_uri: str = Field(description='the server in force ("": its jobs are not exported)')
    experiment: str = Field(description="the experiment in force")
    overrides: TrackingSettings = Field(description="the project's own settings (null: default)")
    default_tracking_uri: str = Field(description="the cluster's (COHORT_MLFLOW_TRACKING_URI)")
