"""The nested blocks of a job spec (services/jobs/spec.py): hyperparameters, roles, role
placement and a profile request. The `distribution:` block is the replica spec's own
(services/wire/replica.DistributionOptions)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator, model_validator

RolePlacementChoice = Literal["any", "separate"]


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
