"""Follow a job in the terminal from its SSE stream: a progress bar per replica with
epoch, step, live loss and accuracy; plain progress lines when output is not a terminal."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from cli.client import CohortClient
from services.statuses import TERMINAL_STATUSES

LINE_EVERY = 2.0  # seconds between plain progress lines per replica


class _View:
    """What the follower shows: one bar (or line) per replica of the current attempt."""

    def __init__(self, job: dict[str, Any], console: Console, progress: Progress | None) -> None:
        hp = job["hyperparameters"]
        # The built-in trainers (and Keras trainers that follow them) name their length;
        # a command's or another trainer's is unknown: steps are counted without a total.
        sized = all(
            isinstance(hp.get(key), int) and hp[key] > 0 for key in ("epochs", "steps_per_epoch")
        )
        self.epochs = int(hp["epochs"]) if sized else 0
        self.steps_per_epoch = int(hp["steps_per_epoch"]) if sized else 0
        self.total: int | None = self.epochs * self.steps_per_epoch if sized else None
        self.console, self.progress = console, progress
        self.job = job
        self.attempt = job["attempt"]
        self.state: dict[int, dict[str, Any]] = {}
        self.tasks: dict[int, TaskID] = {}
        self.printed: dict[int, float] = {}
        self.last_line: dict[int, str] = {}  # plain output: never the same line twice

    def replica(self, index: int) -> dict[str, Any]:
        if index not in self.state:
            self.state[index] = {"step": 0, "loss": None, "accuracy": None}
            if self.progress is not None:
                self.tasks[index] = self.progress.add_task(
                    f"job {self.job['id']} replica {index}",
                    total=self.total,
                    status=self.job["status"],
                    epoch=self._epoch(0),
                    loss="-",
                    acc="-",
                    steps=self._steps(0),
                )
        return self.state[index]

    def _steps(self, step: int) -> str:
        return f"{step}/{self.total}" if self.total is not None else str(step)

    def _epoch(self, step: int) -> str:
        if self.total is None:
            return "-"
        epoch = min(self.epochs, (step - 1) // self.steps_per_epoch + 1) if step else 0
        return f"{epoch}/{self.epochs}"

    def on_status(self, job: dict[str, Any]) -> None:
        self.job = job
        if job["attempt"] != self.attempt:  # a restarted gang starts its bars again
            self.attempt = job["attempt"]
            for index in list(self.state):
                self.state[index].update(step=0, loss=None, accuracy=None)
        for index in range(job["replicas"]):
            self.replica(index)
        # An outcome is the last word, after the final progress; other news comes first.
        final = job["status"] in TERMINAL_STATUSES
        if final:
            self.render(force=True)
        if self.progress is None:
            self.console.print(
                f"job {job['id']} {job['status']}"
                + (f": {job['reason']}" if job.get("reason") else "")
            )
        if not final:
            self.render(force=True)

    def on_metric(self, point: dict[str, Any]) -> None:
        if point["attempt"] != self.attempt:
            return
        state = self.replica(point["replica"])
        if point["name"] in ("loss", "accuracy"):
            state[point["name"]] = point["value"]
        if self.total is None:  # TensorBoard scalars and report() points carry no epoch
            state["step"] = max(state["step"], point["step"])
        elif point["epoch"] is not None:  # per-step points (final metrics have no epoch)
            state["step"] = max(state["step"], min(point["step"], self.total))
        self.render()

    def render(self, force: bool = False) -> None:
        for index, state in sorted(self.state.items()):
            loss = f"{state['loss']:.4f}" if state["loss"] is not None else "-"
            acc = f"{state['accuracy']:.3f}" if state["accuracy"] is not None else "-"
            epoch = self._epoch(state["step"])
            if self.progress is not None:
                self.progress.update(
                    self.tasks[index],
                    completed=state["step"],
                    loss=loss,
                    acc=acc,
                    epoch=epoch,
                    status=self.job["status"],
                    steps=self._steps(state["step"]),
                )
                continue
            now = time.monotonic()
            line = (
                f"replica {index} epoch {epoch} step {self._steps(state['step'])} "
                f"loss {loss} acc {acc}"
            )
            if not state["step"] or line == self.last_line.get(index):
                continue  # nothing new to say for this replica
            if force or now - self.printed.get(index, 0) >= LINE_EVERY:
                self.printed[index] = now
                self.last_line[index] = line
                self.console.print(line)


def follow_job(client: CohortClient, job_id: int, console: Console) -> dict[str, Any]:
    """Show a job's progress until it finishes; returns the final job."""
    job = client.job(job_id)
    progress = None
    if console.is_terminal:
        progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[status]}"),
            TextColumn("epoch {task.fields[epoch]}"),
            TextColumn("step {task.fields[steps]}"),
            TextColumn("loss {task.fields[loss]}"),
            TextColumn("acc {task.fields[acc]}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
    view = _View(job, console, progress)
    if progress is not None:
        progress.start()
    try:
        for event in client.stream(job_id, kinds=("status", "metric")):
            if event.event == "status":
                view.on_status(event.data)
                if event.data["status"] in TERMINAL_STATUSES:
                    break
            elif event.event == "metric":
                view.on_metric(event.data)
        view.render(force=True)  # a stream that ended early: what was seen (once)
    finally:
        if progress is not None:
            progress.stop()
    return client.job(job_id)
