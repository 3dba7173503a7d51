"""`cohort jobs | get | logs | metrics | cancel | nodes`: read and steer jobs over the REST
API. Every command takes `--json` (the API's JSON on stdout, for scripts) and a token
from `--token`, `COHORT_TOKEN` or `~/.config/cohort/token`."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

import typer
from rich.table import Table

from cli.options import (
    JobArg,
    JsonOpt,
    TokenOpt,
    UrlOpt,
    connect,
    console,
    emit_json,
    guarded,
)
from services.statuses import TERMINAL_STATUSES


def _clock(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%H:%M:%S.%f")[:-3]


def _progress_text(job: dict[str, Any]) -> str:
    p = job.get("progress")
    if not p:
        return ""
    eta = f", ETA {p['eta_seconds']:.0f}s" if p.get("eta_seconds") else ""
    return (
        f"epoch {p['epoch']}/{p['epochs']}, step {p['step']}/{p['total_steps']} "
        f"({p['percent']:.0f}%{eta})"
    )


def print_job(job: dict[str, Any]) -> None:
    """A job and its replicas, for people."""
    console.print(
        f"job {job['id']} [bold]{job['name']}[/]: {job['status']} "
        f"(attempt {job['attempt']}) {_progress_text(job)}"
    )
    if job.get("reason"):
        console.print(f"  reason: {job['reason']}")
    table = Table("replica", "node", "address", "status", "exit")
    for r in job.get("replica_list", []):
        table.add_row(
            str(r["index"]),
            r["node_id"],
            r["address"],
            r["status"],
            "" if r["exit_code"] is None else str(r["exit_code"]),
        )
    if job.get("replica_list"):
        console.print(table)


def print_log_line(item: dict[str, Any]) -> None:
    console.print(
        f"[dim]{_clock(item['ts'])} a{item['attempt']} r{item['replica']}[/] {item['line']}",
        markup=True,
        highlight=False,
        soft_wrap=True,
    )


def register(app: typer.Typer) -> None:
    """Add the job and node commands to the `cohort` app."""

    @app.command("jobs")
    def list_jobs(
        status: str | None = None,
        name: str | None = None,
        limit: int = 50,
        token: TokenOpt = None,
        url: UrlOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """List the project's jobs, newest first."""
        params = {
            k: v
            for k, v in {"status": status, "name": name, "limit": limit}.items()
            if v is not None
        }
        page = guarded(lambda: connect(url, token).jobs(**params))
        if as_json:
            emit_json(page)
            return
        table = Table("id", "name", "status", "attempt", "replicas", "trainer", "created")
        for job in page["items"]:
            table.add_row(
                str(job["id"]),
                job["name"],
                job["status"],
                str(job["attempt"]),
                str(job["replicas"]),
                job["trainer"] or " ".join(job.get("command") or []),
                job["created_at"][:19],
            )
        console.print(table)

    @app.command("get")
    def get_job(
        job_id: JobArg, token: TokenOpt = None, url: UrlOpt = None, as_json: JsonOpt = False
    ) -> None:
        """Show one job: status, progress and where its replicas run."""
        job = guarded(lambda: connect(url, token).job(job_id))
        emit_json(job) if as_json else print_job(job)

    @app.command("cancel")
    def cancel_job(
        job_id: JobArg, token: TokenOpt = None, url: UrlOpt = None, as_json: JsonOpt = False
    ) -> None:
        """Cancel a job: every replica on every node is stopped."""
        job = guarded(lambda: connect(url, token).cancel(job_id))
        emit_json(job) if as_json else console.print(f"job {job_id}: {job['status']}")

    @app.command("logs")
    def job_logs(
        job_id: JobArg,
        replica: int | None = None,
        attempt: int | None = None,
        tail: Annotated[int | None, typer.Option(help="only the last N lines")] = None,
        follow: Annotated[
            bool, typer.Option("--follow", "-f", help="keep printing new lines")
        ] = False,
        token: TokenOpt = None,
        url: UrlOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Print a job's logs (each replica's stdout and stderr); -f follows them live."""
        client = connect(url, token)
        params = {
            k: v
            for k, v in {"replica": replica, "attempt": attempt, "tail": tail}.items()
            if v is not None
        }
        items = guarded(lambda: client.logs(job_id, **params))
        for item in items:
            emit_json(item) if as_json else print_log_line(item)
        if not follow:
            return
        last_log = max([item["id"] for item in items], default=0)
        # Resume the stream after the lines printed; status events say when to stop.
        for event in client.stream(
            job_id, kinds=("status", "log"), last_event_id=f"0.{last_log}.0"
        ):
            if event.event == "status" and event.data["status"] in TERMINAL_STATUSES:
                break
            if (
                event.event != "log"
                or (replica is not None and event.data["replica"] != replica)
                or (attempt is not None and event.data["attempt"] != attempt)
            ):
                continue
            emit_json(event.data) if as_json else print_log_line(event.data)

    @app.command("metrics")
    def job_metrics(
        job_id: JobArg,
        name: Annotated[list[str] | None, typer.Option(help="metric name (repeatable)")] = None,
        replica: int | None = None,
        attempt: int | None = None,
        since_step: int | None = None,
        max_points: Annotated[int | None, typer.Option(help="downsample to about N")] = None,
        token: TokenOpt = None,
        url: UrlOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Print a job's stored metric points as a table (or --json)."""
        params: dict[str, Any] = {
            k: v
            for k, v in {
                "name": name,
                "replica": replica,
                "attempt": attempt,
                "since_step": since_step,
                "max_points": max_points,
            }.items()
            if v is not None
        }
        points = guarded(lambda: connect(url, token).metrics(job_id, **params))
        if as_json:
            emit_json(points)
            return
        table = Table("attempt", "replica", "step", "epoch", "name", "value")
        for p in points:
            table.add_row(
                str(p["attempt"]),
                str(p["replica"]),
                str(p["step"]),
                "" if p["epoch"] is None else str(p["epoch"]),
                p["name"],
                f"{p['value']:.6g}",
            )
        console.print(table)

    @app.command("nodes")
    def list_nodes(token: TokenOpt = None, url: UrlOpt = None, as_json: JsonOpt = False) -> None:
        """List the registered nodes with their slots and running replicas."""
        nodes = guarded(lambda: connect(url, token).nodes())
        if as_json:
            emit_json(nodes)
            return
        table = Table(
            "node", "address", "status", "slots", "free", "GPUs", "replicas", "last heartbeat"
        )
        for n in nodes:
            table.add_row(
                n["id"],
                n["address"],
                n["status"],
                str(n["slots"]),
                str(n["free_slots"]),
                str(n["gpus"]),
                str(n["running_replicas"]),
                n["last_heartbeat"][:19],
            )
        console.print(table)
