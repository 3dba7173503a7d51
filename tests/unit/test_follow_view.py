"""`cohort job submit --follow`'s plain output for jobs whose length is known and unknown."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from cli.follow import _View


def job(**fields: Any) -> dict[str, Any]:
    return {
        "id": 7,
        "attempt": 1,
        "replicas": 1,
        "status": "running",
        "reason": None,
        "hyperparameters": {},
        **fields,
    }


def point(step: int, value: float, epoch: int | None) -> dict[str, Any]:
    return {
        "attempt": 1,
        "replica": 0,
        "step": step,
        "epoch": epoch,
        "name": "loss",
        "value": value,
    }


def lines(view_job: dict[str, Any], points: list[dict[str, Any]]) -> list[str]:
    out = io.StringIO()
    view = _View(view_job, Console(file=out, force_terminal=False, width=200), None)
    view.on_status(view_job)
    for p in points:
        view.on_metric(p)
    view.render(force=True)
    return out.getvalue().splitlines()


def test_a_command_job_counts_its_steps_without_a_total() -> None:
    shown = lines(job(command=["python", "train.py"]), [point(1, 2.0, None), point(30, 0.5, None)])
    assert shown[-1] == "replica 0 epoch - step 30 loss 0.5000 acc -"


def test_a_sized_job_shows_epochs_and_steps_of_its_total() -> None:
    sized = job(hyperparameters={"epochs": 2, "steps_per_epoch": 10})
    shown = lines(sized, [point(1, 2.0, 0), point(15, 0.7, 1)])
    assert shown[-1] == "replica 0 epoch 2/2 step 15/20 loss 0.7000 acc -"
