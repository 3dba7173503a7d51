"""Follow a job in the terminal: a Rich progress bar with epoch, step, loss and accuracy."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from cli.client import CohortClient

TERMINAL = {"succeeded", "failed", "cancelled"}


def follow_job(client: CohortClient, job_id: int, console: Console,
               poll_seconds: float = 0.5) -> dict[str, Any]:
    """Show a job's progress until it finishes; returns the final job."""
    job = client.job(job_id)
    hp = job["hyperparameters"]
    epochs, steps_per_epoch = int(hp["epochs"]), int(hp["steps_per_epoch"])
    total = epochs * steps_per_epoch
    last_step = 0
    latest: dict[str, float] = {}
    columns = (TextColumn("[bold]{task.description}"), BarColumn(),
               TextColumn("{task.fields[status]}"), TextColumn("epoch {task.fields[epoch]}"),
               TextColumn("step {task.completed:.0f}/{task.total:.0f}"),
               TextColumn("loss {task.fields[loss]}"), TextColumn("acc {task.fields[acc]}"),
               TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(f"job {job_id} {job['name']}", total=total, status=job["status"],
                                 epoch=f"0/{epochs}", loss="-", acc="-")
        while True:
            job = client.job(job_id)
            points = client.metrics(job_id, since_step=last_step, replica=0,
                                    attempt=job["attempt"], name=["loss", "accuracy"])
            for point in points:
                latest[point["name"]] = point["value"]
                last_step = max(last_step, point["step"])
            progress.update(
                task, completed=min(last_step, total), status=job["status"],
                epoch=f"{min(epochs, last_step // steps_per_epoch + 1) if last_step else 0}"
                      f"/{epochs}",
                loss=f"{latest['loss']:.4f}" if "loss" in latest else "-",
                acc=f"{latest['accuracy']:.3f}" if "accuracy" in latest else "-",
            )
            if job["status"] in TERMINAL:
                return job
            time.sleep(poll_seconds)
