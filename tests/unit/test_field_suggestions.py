"""The declared field closest to an unknown one, found where the unknown key sits."""

from __future__ import annotations

import pytest

from services.field_suggestions import close_field
from services.jobs.schemas import JobCreate
from services.retraining.schemas import ScheduleCreate
from services.sweeps.schemas import SweepCreate


@pytest.mark.parametrize(
    ("model", "loc", "near"),
    [
        (JobCreate, ("replica",), "replicas"),
        (JobCreate, ("gpu_per_replica",), "gpus_per_replica"),
        (JobCreate, ("gpus",), "gpus_per_replica"),  # cut short, not `inputs`
        (JobCreate, ("role",), "roles"),
        (JobCreate, ("roles", "workers"), "worker"),
        (JobCreate, ("role_placement", "chef"), "chief"),
        (JobCreate, ("profile", "step"), "steps"),
        (JobCreate, ("distribution", "mixed_precison"), "mixed_precision"),
        (ScheduleCreate, ("job", "replica"), "replicas"),
        (ScheduleCreate, ("sweep", "template", "replica"), "replicas"),
        (ScheduleCreate, ("promote", "metrc"), "metric"),
        (SweepCreate, ("space", "random", "lr", "log_uniform", "hgih"), "high"),
        (SweepCreate, ("early_stopping", "min_step"), "min_steps"),
        (SweepCreate, ("early_stopping", "asha", "reduction_factr"), "reduction_factor"),
        (SweepCreate, ("early_stopping", "hyperband", "max_step"), "max_steps"),
        (SweepCreate, ("algoritm",), "algorithm"),
        # The tag names the one member meant: the median rule has no reduction factor.
        (SweepCreate, ("early_stopping", "median", "reduction_factor"), None),
        # Nothing close, or no model where the key sits (the values of `env`).
        (JobCreate, ("colour",), None),
        (JobCreate, ("env", "FOO", "replica"), None),
        (JobCreate, (), None),
    ],
)
def test_close_field(model: type, loc: tuple[str, ...], near: str | None) -> None:
    assert close_field(model, loc) == near
