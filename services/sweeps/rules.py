"""The early-stopping rules a sweep spec may name, each carried out by an Optuna pruner
(services/sweeps/study.py `make_pruner`):

    early_stopping: {rule: median, min_steps: 20, min_trials: 2}
    early_stopping: {rule: asha, min_steps: 10, reduction_factor: 3}
    early_stopping: {rule: hyperband, min_steps: 1, max_steps: 81, reduction_factor: 3}

A wrong field is named under its rule (`early_stopping.asha.min_steps`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, StrictInt, Tag, model_validator

MAX_STEP = 2**31 - 1  # steps and replica indexes are SQL INTEGER columns


class MedianStopping(BaseModel):
    """Optuna's MedianPruner: stop a trial whose best value so far is worse than the
    median of the finished trials' values at the same step."""

    model_config = ConfigDict(extra="forbid")

    rule: Literal["median"] = "median"
    min_steps: StrictInt = Field(
        1, ge=0, le=MAX_STEP, description="judge a trial only from this step on"
    )
    min_trials: StrictInt = Field(
        2,
        ge=1,
        le=1_000_000,
        description="how many finished trials must have reported the step to judge by",
    )


class AshaStopping(BaseModel):
    """Asynchronous successive halving (Optuna's SuccessiveHalvingPruner): rung k is at
    step min_steps × reduction_factor^k; a trial reaching a rung goes on only if it is in
    the top 1/reduction_factor of the trials that reached that rung."""

    model_config = ConfigDict(extra="forbid")

    rule: Literal["asha"]
    min_steps: StrictInt = Field(
        ge=1, le=MAX_STEP, description="the step of the first rung: every trial runs this far"
    )
    reduction_factor: StrictInt = Field(
        4, ge=2, le=100, description="rungs are this many times further apart, each keeps 1/this"
    )


class HyperbandStopping(BaseModel):
    """Hyperband (Optuna's HyperbandPruner): several successive-halving brackets, from
    aggressive to none, over a trial's full budget of steps."""

    model_config = ConfigDict(extra="forbid")

    rule: Literal["hyperband"]
    min_steps: StrictInt = Field(
        1, ge=1, le=MAX_STEP, description="the first rung of the most aggressive bracket"
    )
    max_steps: StrictInt = Field(
        ge=2, le=MAX_STEP, description="a trial's full length in steps: its step budget"
    )
    reduction_factor: StrictInt = Field(
        3, ge=2, le=100, description="rungs are this many times further apart, each keeps 1/this"
    )

    @model_validator(mode="after")
    def _min_below_max(self) -> HyperbandStopping:
        if self.min_steps >= self.max_steps:
            raise ValueError(
                f"min_steps ({self.min_steps}) must be below max_steps ({self.max_steps})"
            )
        return self


def _rule_of(value: Any) -> str:
    # A spec stored before the rules were many has no `rule`: it was the median rule.
    if isinstance(value, dict):
        return str(value.get("rule", "median"))
    return str(getattr(value, "rule", "median"))


EarlyStopping = Annotated[
    Annotated[MedianStopping, Tag("median")]
    | Annotated[AshaStopping, Tag("asha")]
    | Annotated[HyperbandStopping, Tag("hyperband")],
    Discriminator(
        _rule_of,
        custom_error_type="invalid_rule",
        custom_error_message="`rule` must be median, asha or hyperband",
    ),
]
