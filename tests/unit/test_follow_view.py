"""`cohort job submit --follow`'s plain output: progress for jobs whose length is known and
unknown, the replicas' output lines, the status changes; and `cohort job show`'s progress."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from cli.follow import _View, log_id, progress_text

UNKNOWN = {
    "step": 0,
    "total_steps": None,
    "epoch": None,
    "epochs": None,
    "percent": None,
    "steps_per_second": None,
    "eta_seconds": None,
}
SIZED = {**UNKNOWN, "total_steps": 20, "epoch": 0, "epochs": 2, "percent": 0.0}


def job(**fields: Any) -> dict[str, Any]:
    return {
        "id": 7,
        "attempt": 1,
        "replicas": 1,
        "status": "running",
        "reason": "",
        "hyperparameters": {},
        "progress": UNKNOWN,
        **fields,
    }


def point(step: int, value: float, epoch: int | None, replica: int = 0) -> dict[str, Any]:
    return {
        "attempt": 1,
        "replica": replica,
        "step": step,
        "epoch": epoch,
        "name": "loss",
        "value": value,
    }


def view_of(view_job: dict[str, Any]) -> tuple[_View, io.StringIO]:
    out = io.StringIO()
    return _View(view_job, Console(file=out, force_terminal=False, width=200), None), out


def lines(view_job: dict[str, Any], points: list[dict[str, Any]]) -> list[str]:
    view, out = view_of(view_job)
    view.on_status(view_job)
    for p in points:
        view.on_metric(p)
    view.render(force=True)
    return out.getvalue().splitlines()


def test_a_command_job_counts_its_steps_without_a_total() -> None:
    shown = lines(job(command=["python", "train.py"]), [point(1, 2.0, None), point(30, 0.5, None)])
    assert shown[-1] == "replica 0 step 30 loss 0.5000"


def test_a_command_job_shows_the_epoch_its_points_carry() -> None:
    shown = lines(job(command=["python", "train.py"]), [point(12, 0.5, 1)])
    assert shown[-1] == "replica 0 epoch 2 step 12 loss 0.5000"


def test_a_command_that_names_epochs_in_its_hyperparameters_gets_no_total() -> None:
    # Only the API's progress says a length is known: never the hyperparameters alone.
    hp = {"epochs": 5, "steps_per_epoch": 20}
    shown = lines(job(hyperparameters=hp), [point(3, 0.5, None)])
    assert shown[-1] == "replica 0 step 3 loss 0.5000"


def test_a_sized_job_shows_epochs_and_steps_of_its_total() -> None:
    shown = lines(job(progress=SIZED), [point(1, 2.0, 0), point(15, 0.7, 1)])
    assert shown[-1] == "replica 0 epoch 2/2 step 15/20 loss 0.7000"


def test_status_changes_are_said_once_each_with_their_reason() -> None:
    running = job(status="running", reason="")
    view, out = view_of(running)
    # A status event replayed from the start: the change's own reason, not the newest.
    view.on_status(job(status="queued", reason="placed", change={"id": 1, "reason": "waiting"}))
    view.on_status(running)
    view.on_status(running)  # the same status again (a progress update): nothing to say
    view.on_status(job(status="restarting", reason="replica 1 exited 1"))
    view.on_status(job(status="succeeded", reason="replica 0 exited 0", attempt=2))
    assert out.getvalue().splitlines() == [
        "job 7 queued: waiting",
        "job 7 running",
        "job 7 restarting: replica 1 exited 1",
        "job 7 succeeded: replica 0 exited 0",
    ]


def test_output_lines_carry_their_replica_and_are_never_printed_twice() -> None:
    view, out = view_of(job(replicas=2))
    lines_sent = [
        ({"attempt": 1, "replica": 0, "line": "Epoch 1/2 [=>..]"}, 4),
        ({"attempt": 1, "replica": 1, "line": "[bold]not markup[/]"}, 5),
        ({"attempt": 1, "replica": 1, "line": "[bold]not markup[/]"}, 5),  # sent again
        ({"attempt": 2, "replica": 0, "line": "after a restart"}, 9),
    ]
    for item, line_id in lines_sent:
        view.on_log(item, line_id)
    assert out.getvalue().splitlines() == [
        "[r0] Epoch 1/2 [=>..]",
        "[r1] [bold]not markup[/]",
        "[a2 r0] after a restart",
    ]


def test_the_log_id_is_the_middle_of_an_event_id() -> None:
    assert log_id("12.345.6") == 345
    assert log_id(None) is None and log_id("garbage") is None


def test_job_show_says_only_what_a_job_of_unknown_length_reported() -> None:
    assert progress_text(UNKNOWN) == ""
    assert progress_text({**UNKNOWN, "step": 30, "steps_per_second": 2.0}) == "step 30"
    assert progress_text({**UNKNOWN, "step": 30, "epoch": 3}) == "epoch 3, step 30"
    sized = {**SIZED, "step": 15, "epoch": 2, "percent": 75.0, "eta_seconds": 4.2}
    assert progress_text(sized) == "epoch 2/2, step 15/20 (75%, ETA 4s)"
