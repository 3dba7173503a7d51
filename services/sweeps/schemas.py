"""Pydantic I/O schemas of sweeps: the spec a user submits, and what the API reads back.

A sweep spec (YAML for `cohort sweep create`, JSON for `POST /api/v1/sweeps`):

    name: lr-width
    template: {trainer: mlp_digits, replicas: 1, strategy: one_device,
               hyperparameters: {epochs: 3}}          # any JobCreate
    algorithm: tpe         # grid | random | tpe | cmaes (left out: grid or random, by space)
    space:
      random: {learning_rate: {distribution: log_uniform, low: 1e-4, high: 0.1},
               width: {distribution: int, low: 16, high: 128},
               optimizer: {distribution: choice, values: [adam, sgd]}}
      # or grid: {learning_rate: [0.01, 0.001], width: [32, 64]}   (algorithm: grid)
      # seed: 7   (sampled spaces only; drawn and stored when left out)
    trials: 20             # sampled spaces only; a grid runs every combination
    max_concurrent: 2
    objective: {metric: eval_accuracy, mode: max, replica: 0, value: last}
    early_stopping: {rule: asha, min_steps: 10, reduction_factor: 3}   # or median, hyperband

A parameter named `replicas`, `gpus_per_replica` or `strategy` sets that field of the
trial's job; every other parameter is merged into its hyperparameters. Optuna carries
out the algorithm and the rule (rules.py) (services/sweeps/study.py); the checks that need the
space and the algorithm together (grid with distributions, cmaes without two numeric
parameters) are made by `store.check_sweep`, naming the field.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    field_validator,
    model_validator,
)

from services.jobs.schemas import JobCreate, check_name
from services.statuses import JobStatus, SweepStatus
from services.sweeps.rules import MAX_STEP, EarlyStopping

_PARAM = re.compile(r"^[A-Za-z_]\w{0,63}$")
_METRIC = re.compile(r"^[A-Za-z_][\w./-]{0,63}$")
Number = StrictInt | StrictFloat
MAX_SEED = 2**63 - 1
MAX_EXACT_INT = 2**53


class _Range(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="after")
    def _low_below_high(self) -> _Range:
        low, high = getattr(self, "low"), getattr(self, "high")  # noqa: B009 - set by subclasses
        if low >= high:
            raise ValueError(f"low ({low}) must be below high ({high})")
        # The samplers work in floats (numpy): a bound or a width past the largest float
        # cannot be drawn from.
        try:
            finite = math.isfinite(float(high) - float(low))
        except OverflowError:
            finite = False
        if not finite:
            raise ValueError("low, high and high - low must be finite floats")
        return self


class Uniform(_Range):
    """A float drawn uniformly from [low, high]."""

    distribution: Literal["uniform"]
    low: Number
    high: Number


class LogUniform(_Range):
    """A float whose logarithm is uniform: low and high both above 0."""

    distribution: Literal["log_uniform"]
    low: Number = Field(gt=0, description="above 0")
    high: Number = Field(gt=0, description="above 0")


class IntRange(_Range):
    """A whole number from low to high, both included."""

    distribution: Literal["int"]
    # Whole numbers a float holds exactly: the samplers work in floats.
    low: StrictInt = Field(ge=-MAX_EXACT_INT, le=MAX_EXACT_INT)
    high: StrictInt = Field(ge=-MAX_EXACT_INT, le=MAX_EXACT_INT)


class Choice(BaseModel):
    """One of `values`, each equally likely."""

    model_config = ConfigDict(extra="forbid")

    distribution: Literal["choice"]
    values: list[Any] = Field(min_length=1, max_length=1000)


Distribution = Annotated[
    Uniform | LogUniform | IntRange | Choice, Field(discriminator="distribution")
]


def _check_names(names: dict[str, Any]) -> None:
    for name in names:
        if not _PARAM.fullmatch(name):
            raise ValueError(f"parameter name {name!r} must be an identifier")


class SearchSpace(BaseModel):
    """Exactly one of `grid` (every combination) and `random` (distributions that the
    random, tpe and cmaes algorithms sample `trials` times)."""

    model_config = ConfigDict(extra="forbid")

    grid: dict[str, Annotated[list[Any], Field(min_length=1, max_length=1000)]] | None = Field(
        None, description="parameter -> the values to try; a trial per combination"
    )
    random: dict[str, Distribution] | None = Field(
        None,
        description="parameter -> {distribution: uniform|log_uniform|int|choice, ...}, "
        "sampled by the random, tpe or cmaes algorithm",
    )
    seed: StrictInt | None = Field(
        None,
        ge=0,
        le=MAX_SEED,
        description="sampled spaces only: the same seed draws the same parameters (for "
        "tpe and cmaes, given the same results); left out, one is drawn and shown",
    )

    @model_validator(mode="after")
    def _one_kind(self) -> SearchSpace:
        if not self.grid and not self.random:
            raise ValueError(
                "the space is empty: give `grid` (parameter -> list of values) "
                "or `random` (parameter -> distribution)"
            )
        if self.grid and self.random:
            raise ValueError("give either `grid` or `random`, not both")
        if self.grid and self.seed is not None:
            raise ValueError("`seed` is for a sampled (`random`) space; a grid has no draws")
        _check_names(self.grid or self.random or {})
        return self


class Objective(BaseModel):
    """What makes a trial best: one metric of one replica, its last or best value."""

    model_config = ConfigDict(extra="forbid")

    metric: str = Field(description="a metric the trainer reports, e.g. eval_accuracy")
    mode: Literal["min", "max"] = Field(description="max: higher is better")
    replica: StrictInt = Field(
        0, ge=0, le=MAX_STEP, description="whose reports count; 0 is the chief"
    )
    value: Literal["last", "best"] = Field(
        "last", description="last: the value at the trial's last step; best: its best value"
    )

    @field_validator("metric")
    @classmethod
    def _metric_name(cls, value: str) -> str:
        if not _METRIC.fullmatch(value):
            raise ValueError("use a metric name such as 'eval_accuracy'")
        return value


Algorithm = Literal["grid", "random", "tpe", "cmaes"]


class SweepCreate(BaseModel):
    """`POST /api/v1/sweeps`: many trials of one job template over a search space."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("sweep", min_length=1, max_length=100)
    template: JobCreate = Field(description="the same spec as POST /api/v1/jobs")
    algorithm: Algorithm | None = Field(
        None,
        description="grid (every combination of space.grid), random, tpe or cmaes (sampling "
        "space.random), carried out by Optuna's samplers; left out: grid for a grid space, "
        "random otherwise",
    )
    space: SearchSpace
    trials: StrictInt | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="sampled spaces: how many trials (at most "
        "COHORT_MAX_SWEEP_TRIALS); a grid runs one per combination",
    )
    max_concurrent: StrictInt = Field(
        1, ge=1, le=10_000, description="at most this many trials not ended at once"
    )
    objective: Objective
    early_stopping: EarlyStopping | None = None

    _name_chars = field_validator("name")(check_name)

    @model_validator(mode="after")
    def _trials_for_random(self) -> SweepCreate:
        if self.space.random and self.trials is None:
            raise ValueError("a random space needs `trials`: how many draws to run")
        return self

    @property
    def search_algorithm(self) -> Algorithm:
        """The algorithm, as given or as the space implies."""
        return self.algorithm or ("grid" if self.space.grid else "random")


class TrialRead(BaseModel):
    """One trial: its job, parameters, and objective value so far."""

    index: int
    job_id: int
    name: str
    status: JobStatus
    reason: str
    attempt: int
    parameters: dict[str, Any]
    objective_value: float | None = Field(
        None, description="the objective (its metric's last or best value) so far"
    )
    stopped_early: bool = Field(False, description="cancelled by the early-stopping rule")
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None


class SweepRead(BaseModel):
    id: int
    project: str
    name: str
    status: SweepStatus
    reason: str
    template: dict[str, Any] = Field(description="the job template, as stored")
    algorithm: Algorithm
    space: dict[str, Any]
    seed: int | None = Field(None, description="a sampled space's seed (as drawn if not given)")
    objective: Objective
    early_stopping: EarlyStopping | None
    max_concurrent: int
    trials_total: int
    trials_created: int
    trial_counts: dict[str, int] = Field(
        default_factory=dict, description="job status -> number of trials in it"
    )
    best_job_id: int | None = Field(
        None, description="the best succeeded trial's job (so far, while running)"
    )
    best_value: float | None
    best_parameters: dict[str, Any] | None = None
    schedule_id: int | None = None
    scheduled_for: dt.datetime | None = None
    created_at: dt.datetime
    finished_at: dt.datetime | None
    trials: list[TrialRead] | None = Field(
        None, description="every trial, by index (GET /sweeps/{id} only)"
    )


class SweepList(BaseModel):
    items: list[SweepRead]
    next_cursor: str | None
