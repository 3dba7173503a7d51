"""Pydantic schemas of a schedule's data trigger (services/retraining/data_triggers.py):
the trigger as given and as shown, and the schedule fields that carry them (mixed into
the schedule schemas of services/retraining/schemas.py)."""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator

from services.storage.keys import DATA_PREFIX, InvalidKey, check_data_path

MAX_SETTLE = 24 * 3600


class DataTrigger(BaseModel):
    """Fire once per new content of a file or prefix of the project's data."""

    model_config = ConfigDict(extra="forbid")

    data: str = Field(
        max_length=1024,
        examples=["data/digits"],
        description="'data/<path or prefix>': a file, or every file under a prefix",
    )
    settle_seconds: StrictInt = Field(
        30,
        ge=0,
        le=MAX_SETTLE,
        examples=[30],
        description="fire only once the newest change under it is this old, so an "
        "upload of many files is one run",
    )

    @field_validator("data")
    @classmethod
    def _data_path(cls, value: str) -> str:
        path = value.removeprefix(f"{DATA_PREFIX}/").removesuffix("/")
        if path == value or not path:
            raise ValueError(
                f"{value!r} must name the project's data as 'data/<path or prefix>', "
                "e.g. 'data/digits' (upload with `cohort data push FILE PATH`)"
            )
        try:
            check_data_path(path)
        except InvalidKey as exc:
            raise ValueError(str(exc)) from exc
        return f"{DATA_PREFIX}/{path}"

    @property
    def path(self) -> str:
        """The path or prefix relative to the project's data."""
        return self.data.removeprefix(f"{DATA_PREFIX}/")


class DataTriggerIn(DataTrigger):
    """A data trigger as given: what to do about the content there when it is set."""

    fire_on_existing: bool = Field(
        False,
        examples=[False],
        description="also fire for the content there when the trigger is set "
        "(by default only later changes fire)",
    )


class TriggerSpec(BaseModel):
    """The `trigger` field of a schedule as created or updated."""

    trigger: DataTriggerIn | None = Field(
        None,
        examples=[{"data": "data/digits", "settle_seconds": 30}],
        description="fire on new content of this data (besides or instead of cron/interval)",
    )


class TriggerView(BaseModel):
    """A schedule's trigger as shown, with the content it handled last."""

    trigger: DataTrigger | None = None
    data_version: str | None = Field(
        None, description="the data trigger's content last handled (a digest)"
    )
    data_version_at: dt.datetime | None = Field(
        None, description="the newest change of that content"
    )


def check_when(cron: str | None, interval_seconds: int | None, trigger: object) -> None:
    """A new schedule fires on a cron, an interval, data, or data and one of the two.

    Raises:
        ValueError: naming the fields to give.
    """
    if cron is not None and interval_seconds is not None:
        raise ValueError("give at most one of 'cron' and 'interval_seconds'")
    if cron is None and interval_seconds is None and trigger is None:
        raise ValueError(
            "give 'cron', 'interval_seconds' or 'trigger' "
            "(e.g. trigger: {data: 'data/digits'}) to say when it fires"
        )
