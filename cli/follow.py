"""Follow a job in the terminal from its SSE stream: its replicas' output, line by line
and prefixed by the replica (`[r0] ...`), its status changes, and a progress bar per
replica with its step, live loss and accuracy.

On a terminal the output and the status changes scroll above the bars, which stay at
the bottom (rich's Progress: a console.print goes above its live display). Piped, the
same lines plain, and a progress line per replica at most every LINE_EVERY seconds.
A job of known length (a built-in trainer) shows epochs and steps of its total; any
other shows what it reported: its step, and its epoch if its points carry one.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.text import Text

from cohort.client import Client
from services.statuses import TERMINAL_STATUSES

LINE_EVERY = 2.0  # seconds between plain progress lines per replica


def progress_text(progress: dict[str, Any] | None) -> str:
    """A job's progress as `cohort job show` says it: `epoch 2/5, step 30/100 (30%, ETA
    12s)` when its length is known, `epoch 2, step 30` (or `step 30`) when it is not."""
    if not progress:
        return ""
    if progress.get("total_steps") is None:
        if not progress["step"]:
            return ""  # nothing reported yet
        epoch = f"epoch {progress['epoch']}, " if progress.get("epoch") else ""
        return f"{epoch}step {progress['step']}"
    eta = f", ETA {progress['eta_seconds']:.0f}s" if progress.get("eta_seconds") else ""
    return (
        f"epoch {progress['epoch']}/{progress['epochs']}, step {progress['step']}/"
        f"{progress['total_steps']} ({progress['percent']:.0f}%{eta})"
    )


def output_line(item: dict[str, Any]) -> Text:
    """One line a replica wrote, after its replica (`[r0]`, `[a2 r0]` from a restart on)."""
    who = f"a{item['attempt']} r{item['replica']}" if item["attempt"] > 1 else f"r{item['replica']}"
    return Text.assemble((f"[{who}] ", "dim"), item["line"])


def status_change(job: dict[str, Any]) -> tuple[tuple[Any, ...], str]:
    """A status event's change as said once (`job 7 restarting: <why>`), and what tells
    one change from the next. A stream's status event carries the change (`change`: its
    own reason); the job's view has the newest reason only."""
    change = job.get("change") or {}
    reason = change.get("reason", job.get("reason")) or ""
    key = (job["status"], job["attempt"], change.get("id", reason))
    return key, f"job {job['id']} {job['status']}" + (f": {reason}" if reason else "")


def log_id(event_id: str | None) -> int | None:
    """The log line id in a stream event's id (`<metric id>.<log id>.<event id>`)."""
    parts = (event_id or "").split(".")
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


class _View:
    """What the follower shows: the output, the status changes, and one bar (or line)
    per replica of the current attempt."""

    def __init__(self, job: dict[str, Any], console: Console, progress: Progress | None) -> None:
        # The API knows the length of a built-in trainer's run (JobRead.progress); a
        # command's, or another trainer's, is counted without a total.
        known = job.get("progress") or {}
        self.total: int | None = known.get("total_steps")
        self.epochs = int(known.get("epochs") or 0) if self.total else 0
        self.steps_per_epoch = self.total // self.epochs if self.total and self.epochs else 0
        self.console, self.progress = console, progress
        self.job = job
        self.attempt = job["attempt"]
        self.state: dict[int, dict[str, Any]] = {}
        self.tasks: dict[int, TaskID] = {}
        self.printed: dict[int, float] = {}
        self.last_line: dict[int, str] = {}  # plain output: never the same line twice
        self.said: tuple[Any, ...] | None = None  # the last status change printed
        self.last_log = 0  # the newest output line printed (its id): none twice

    def replica(self, index: int) -> dict[str, Any]:
        if index not in self.state:
            self.state[index] = {"step": 0, "epoch": None, "loss": None, "accuracy": None}
            if self.progress is not None:
                self.tasks[index] = self.progress.add_task(
                    f"job {self.job['id']} replica {index}",
                    total=self.total,
                    status=self.job["status"],
                    info=self.describe(index),
                )
        return self.state[index]

    def describe(self, index: int) -> str:
        """`epoch 2/3 step 30/60 loss 0.1234 acc 0.900`: what is known of a replica."""
        state = self.state[index]
        step = state["step"]
        if self.total is not None:
            epoch = min(self.epochs, (step - 1) // self.steps_per_epoch + 1) if step else 0
            parts = [f"epoch {epoch}/{self.epochs}", f"step {step}/{self.total}"]
        else:
            parts = [] if state["epoch"] is None else [f"epoch {state['epoch']}"]
            parts.append(f"step {step}")
        if state["loss"] is not None:
            parts.append(f"loss {state['loss']:.4f}")
        if state["accuracy"] is not None:
            parts.append(f"acc {state['accuracy']:.3f}")
        return " ".join(parts)

    def on_status(self, job: dict[str, Any]) -> None:
        self.job = job
        if job["attempt"] != self.attempt:  # a restarted gang starts its bars again
            self.attempt = job["attempt"]
            for index in list(self.state):
                self.state[index].update(step=0, epoch=None, loss=None, accuracy=None)
        for index in range(job["replicas"]):
            self.replica(index)
        # An outcome is the last word, after the final progress; other news comes first.
        final = job["status"] in TERMINAL_STATUSES
        if final:
            self.render(force=True)
        key, said = status_change(job)
        if key != self.said:
            self.said = key
            self.console.print(said, highlight=False)
        if not final:
            self.render(force=True)

    def on_metric(self, point: dict[str, Any]) -> None:
        if point["attempt"] != self.attempt:
            return
        state = self.replica(point["replica"])
        if point["name"] in ("loss", "accuracy"):
            state[point["name"]] = point["value"]
        if self.total is None:  # what it reported: its step, and its epoch if any
            if point["step"] >= state["step"]:
                state["step"] = point["step"]
                if point["epoch"] is not None:
                    state["epoch"] = point["epoch"] + 1  # points count epochs from 0
        elif point["epoch"] is not None:  # per-step points (final metrics have no epoch)
            state["step"] = max(state["step"], min(point["step"], self.total))
        self.render()

    def on_log(self, item: dict[str, Any], line_id: int | None) -> None:
        """Print a line a replica wrote, above the bars; once, even if sent again."""
        if line_id is not None:
            if line_id <= self.last_log:
                return
            self.last_log = line_id
        self.console.print(output_line(item), soft_wrap=True, highlight=False)

    def render(self, force: bool = False) -> None:
        for index, state in sorted(self.state.items()):
            info = self.describe(index)
            if self.progress is not None:
                # A bar of unknown length pulses while it runs, and is full once it ended.
                ended = self.total is None and self.job["status"] in TERMINAL_STATUSES
                self.progress.update(
                    self.tasks[index],
                    completed=state["step"],
                    total=max(state["step"], 1) if ended else self.total,
                    status=self.job["status"],
                    info=info,
                )
                continue
            now = time.monotonic()
            line = f"replica {index} {info}"
            if not state["step"] or line == self.last_line.get(index):
                continue  # nothing new to say for this replica
            if force or now - self.printed.get(index, 0) >= LINE_EVERY:
                self.printed[index] = now
                self.last_line[index] = line
                self.console.print(line, highlight=False)


def _bars(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[status]}"),
        TextColumn("{task.fields[info]}", markup=False),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )


def follow_job(
    client: Client,
    job_id: int,
    console: Console,
    *,
    output: bool = True,
    output_tail: int | None = None,
) -> dict[str, Any]:
    """Show a job's progress, and with `output` its replicas' lines, until it finishes;
    returns the final job. `output_tail`: begin with the last N lines rather than all (a
    job that has run for a while), and follow on from them."""
    job = client.job(job_id).to_dict()
    progress = _bars(console) if console.is_terminal else None
    view = _View(job, console, progress)
    kinds: tuple[str, ...] = ("status", "metric", "log") if output else ("status", "metric")
    start = None
    if progress is not None:
        progress.start()
    try:
        if output and output_tail:
            tail = client.logs(job_id, tail=output_tail)
            for item in tail:
                view.on_log(item.to_dict(), item.id)
            start = f"0.{view.last_log}.0" if tail else None
        for event in client.stream(job_id, kinds=kinds, last_event_id=start):
            if event.event == "status":
                view.on_status(event.data)
                if event.data["status"] in TERMINAL_STATUSES:
                    break
            elif event.event == "metric":
                view.on_metric(event.data)
            elif event.event == "log":
                view.on_log(event.data, log_id(event.id))
        view.render(force=True)  # a stream that ended early: what was seen (once)
    finally:
        if progress is not None:
            progress.stop()
    return client.job(job_id).to_dict()
