"""`cohort sweep show --follow`'s view, fed a scripted sequence of API answers: piped, one
line per trial change then the final table; on a terminal, redrawn until the sweep ends."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import httpx
from rich.console import Console

from cli.sweep_follow import follow_sweep


def sweep(
    status: str, *trials: tuple[str, float | None], best: int | None = None
) -> dict[str, Any]:
    return {
        "id": 7,
        "name": "lr",
        "status": status,
        "reason": f"it is {status}",
        "trial_counts": {},
        "trials_created": len(trials),
        "trials_total": 2,
        "max_concurrent": 2,
        "best_job_id": best,
        "best_value": 0.9 if best else None,
        "best_parameters": {"learning_rate": 0.1} if best else None,
        "objective": {"metric": "eval_accuracy", "mode": "max"},
        "trials": [
            {
                "index": i,
                "job_id": 10 + i,
                "status": s,
                "objective_value": v,
                "parameters": {"learning_rate": 0.1 / (i + 1)},
                "reason": "",
                "stopped_early": False,
            }
            for i, (s, v) in enumerate(trials)
        ],
    }


ANSWERS = [
    sweep("running", ("queued", None)),
    sweep("running", ("running", None), ("queued", None)),
    sweep("running", ("running", None), ("queued", None)),  # nothing moved: no line
    sweep("succeeded", ("succeeded", 0.9), ("succeeded", 0.5), best=10),
]


def scripted(answers: list[dict[str, Any]], fail_at: int | None = None) -> Any:
    """A fetch returning `answers` in turn; call number `fail_at` (0-based) cannot connect."""
    it: Iterator[dict[str, Any]] = iter(answers)
    calls = [0]

    def fetch() -> dict[str, Any]:
        calls[0] += 1
        if calls[0] - 1 == fail_at:
            raise httpx.ConnectError("the api restarts")
        return next(it)

    return fetch


def test_piped_it_prints_a_line_per_change_then_the_final_table() -> None:
    out = io.StringIO()
    final = follow_sweep(scripted(ANSWERS), Console(file=out, width=160), poll=0)
    assert final["status"] == "succeeded"
    lines = out.getvalue().splitlines()
    assert lines[:4] == [
        "trial 0 (job 10): queued, eval_accuracy -",
        "trial 0 (job 10): running, eval_accuracy -",
        "trial 1 (job 11): queued, eval_accuracy -",
        "trial 0 (job 10): succeeded, eval_accuracy 0.9",
    ]
    assert lines[4] == "trial 1 (job 11): succeeded, eval_accuracy 0.5"
    assert "sweep 7 lr: succeeded - it is succeeded" in out.getvalue()
    assert "best: job 10 = 0.9 {'learning_rate': 0.1}" in out.getvalue()
    assert "\x1b[" not in out.getvalue()


def test_on_a_terminal_it_redraws_until_the_end_through_an_api_hiccup() -> None:
    out = io.StringIO()
    answers = [ANSWERS[0], ANSWERS[1], ANSWERS[3]]
    console = Console(file=out, width=160, force_terminal=True, color_system=None)
    final = follow_sweep(scripted(answers), console, poll=0)
    assert final["status"] == "succeeded"
    screen = out.getvalue()
    assert screen.count("sweep 7 lr: running") >= 1 and "sweep 7 lr: succeeded" in screen
    assert "\x1b[" in screen  # drawn in place: cursor movement between frames


def test_an_api_that_does_not_answer_for_a_moment_is_asked_again() -> None:
    out = io.StringIO()
    final = follow_sweep(
        scripted([ANSWERS[0], ANSWERS[3]], fail_at=1), Console(file=out, width=160), poll=0
    )
    assert final["status"] == "succeeded"
    assert "trial 0 (job 10): succeeded, eval_accuracy 0.9" in out.getvalue()
