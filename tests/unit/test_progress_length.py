"""Which jobs' progress has a total: the built-in trainers' and a trainer's whose job gave
its length; never a command's (its script runs as long as it says)."""

from __future__ import annotations

from typing import Any

import pytest

from services.telemetry.hints import no_metrics_hint
from services.telemetry.progress import Length, job_length


@pytest.mark.parametrize(
    ("trainer", "hyperparameters", "length"),
    [
        ("mlp_digits", {"epochs": 3, "steps_per_epoch": 20}, Length(3, 20)),
        ("cnn_digits", {}, Length(5, 20)),  # a row stored without them: the defaults it ran
        ("trainer:train", {"epochs": 2, "steps_per_epoch": 7}, Length(2, 7)),
        ("trainer:train", {"epochs": 2}, None),
        ("trainer:train", {"epochs": True, "steps_per_epoch": 7}, None),
        (None, {}, None),
        (None, {"epochs": 5, "steps_per_epoch": 20}, None),
    ],
)
def test_job_length(trainer: str | None, hyperparameters: dict[str, Any], length: Any) -> None:
    assert job_length(trainer, hyperparameters) == length


def test_the_hint_for_no_metrics_says_how_each_kind_of_code_reports_them() -> None:
    assert no_metrics_hint(7, None, finished=True) == (
        "job 7 reported no metrics: write TensorBoard scalars under $COHORT_TENSORBOARD_DIR "
        "or call cohort.report()"
    )
    assert no_metrics_hint(7, "trainer:train", finished=False).startswith(
        "job 7 has reported no metrics yet: pass ctx.callbacks() to model.fit, write TensorBoard"
    )
