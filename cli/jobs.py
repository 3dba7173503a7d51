"""`cohort job submit | list | show | logs | metrics | cancel`: run, read and steer jobs over
the REST API. Every command takes `--json` (the API's JSON on stdout, for scripts) and a
token from `--token`, `COHORT_TOKEN` or `~/.config/cohort/token`."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from cli.follow import log_id, progress_text, status_change
from cli.options import (
    FollowOpt,
    FormatOpt,
    JobArg,
    JsonOpt,
    ListFormat,
    OutputOpt,
    TokenOpt,
    UrlOpt,
    connect,
    console,
    emit_json,
    err,
    guarded,
    load_spec,
    print_listing,
)
from services.statuses import TERMINAL_STATUSES
from services.telemetry.hints import no_metrics_hint

OUTPUT_TAIL = 50  # lines of a job's output `job show --follow` begins with

app = typer.Typer(
    name="job", help="Jobs: submit, list, show, follow, cancel.", no_args_is_help=True
)


def _clock(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%H:%M:%S.%f")[:-3]


def print_job(job: dict[str, Any]) -> None:
    """A job and its replicas, for people."""
    console.print(
        f"job {job['id']} [bold]{job['name']}[/]: {job['status']} "
        f"(attempt {job['attempt']}) {progress_text(job.get('progress'))}"
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
    # A Text, not markup: a line is the replica's own, brackets and all.
    when = f"{_clock(item['ts'])} a{item['attempt']} r{item['replica']} "
    console.print(Text.assemble((when, "dim"), item["line"]), highlight=False, soft_wrap=True)


def report(client: Any, job: dict[str, Any]) -> int:
    """Say how a followed job ended (its held-out evaluation, or its last loss); the exit
    code: 0 if it succeeded."""
    if job["status"] != "succeeded":
        err.print(f"[red]job {job['id']} {job['status']}:[/] {job['reason']}")
        return 1
    evals = {
        p["name"]: p["value"]
        for p in client.metrics(job["id"], replica=0, name=["eval_accuracy", "eval_loss"])
    }
    for replica in job["replica_list"]:
        console.print(
            f"  replica {replica['index']} on {replica['node_id']} "
            f"({replica['address']}): exit {replica['exit_code']}"
        )
    if len(evals) == 2:  # the built-in trainer's held-out evaluation
        console.print(
            f"[green]job {job['id']} succeeded[/]: held-out accuracy "
            f"{evals['eval_accuracy']:.3f}, loss {evals['eval_loss']:.4f}"
        )
        return 0
    losses = client.metrics(job["id"], replica=0, name=["loss"], attempt=job["attempt"])
    last = f": last loss {losses[-1]['value']:.4f} at step {losses[-1]['step']}" if losses else ""
    console.print(f"[green]job {job['id']} succeeded[/]{last}")
    if not losses and not client.metrics(job["id"], limit=1):
        console.print(no_metrics_hint(job["id"], job["trainer"], finished=True), highlight=False)
    return 0


def follow_to_end(
    client: Any, job_id: int, as_json: bool, *, output: bool = True, output_tail: int | None = None
) -> None:
    """Show a job's progress (and with `output` its replicas' lines) until it ends, then
    exit with its outcome (the final job on stdout with --json; the rest on stderr)."""
    from cli.follow import follow_job

    job = follow_job(
        client, job_id, err if as_json else console, output=output, output_tail=output_tail
    )
    if as_json:
        emit_json(job)
        raise typer.Exit(0 if job["status"] == "succeeded" else 1)
    raise typer.Exit(report(client, job))


@app.command("submit")
def submit_job(
    spec_file: Annotated[
        Path, typer.Argument(help="job spec (YAML or JSON)", exists=True, dir_okay=False)
    ],
    code: Annotated[
        Path | None,
        typer.Option(
            "--code",
            help="a directory to pack (honouring .cohortignore) and run the job in",
            exists=True,
            file_okay=False,
        ),
    ] = None,
    follow: FollowOpt = False,
    output: OutputOpt = True,
    token: TokenOpt = None,
    url: UrlOpt = None,
    idempotency_key: str | None = None,
    as_json: JsonOpt = False,
) -> None:
    """Submit a job from a spec file; with --code, check the spec, then upload that
    directory (once: an unchanged one is not sent again); with --follow, show its
    replicas' output and progress, and exit with its outcome."""
    from cli.submission import submit_spec

    submit_spec(
        load_spec(spec_file, "job"),
        code=code,
        follow=follow,
        output=output,
        token=token,
        url=url,
        idempotency_key=idempotency_key,
        as_json=as_json,
    )


@app.command("list")
def list_jobs(
    status: str | None = None,
    name: str | None = None,
    limit: int = 50,
    token: TokenOpt = None,
    url: UrlOpt = None,
    as_json: JsonOpt = False,
    output: FormatOpt = ListFormat.table,
) -> None:
    """List the project's jobs, newest first."""
    params = {
        k: v for k, v in {"status": status, "name": name, "limit": limit}.items() if v is not None
    }
    page = guarded(lambda: connect(url, token).jobs(**params))
    print_listing(
        page["items"],
        {
            "id": lambda j: j["id"],
            "name": lambda j: j["name"],
            "status": lambda j: j["status"],
            "attempt": lambda j: j["attempt"],
            "replicas": lambda j: j["replicas"],
            "trainer": lambda j: j["trainer"] or " ".join(j.get("command") or []),
            "created": lambda j: j["created_at"][:19],
        },
        as_json=as_json,
        output=output,
        whole=page,
    )


@app.command("show")
def show_job(
    job_id: JobArg,
    follow: FollowOpt = False,
    output: OutputOpt = True,
    token: TokenOpt = None,
    url: UrlOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show one job: status, progress and where its replicas run; with --follow, its
    replicas' output (from its last 50 lines) and progress until it ends,
    exiting with its outcome."""
    if follow:
        follow_to_end(connect(url, token), job_id, as_json, output=output, output_tail=OUTPUT_TAIL)
    job = guarded(lambda: connect(url, token).job(job_id))
    emit_json(job) if as_json else print_job(job.to_dict())


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
    follow: Annotated[bool, typer.Option("--follow", "-f", help="keep printing new lines")] = False,
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
        emit_json(item) if as_json else print_log_line(item.to_dict())
    if not follow:
        return
    last_log = max([item["id"] for item in items], default=0)
    said = None
    # Resume the stream after the lines printed; status events say when to stop, and
    # their changes are said on stderr (stdout holds the lines alone).
    for event in client.stream(job_id, kinds=("status", "log"), last_event_id=f"0.{last_log}.0"):
        if event.event == "status":
            key, text = status_change(event.data)
            if key != said:
                said = key
                err.print(text, highlight=False)
            if event.data["status"] in TERMINAL_STATUSES:
                break
            continue
        line_id = log_id(event.id)
        if (
            event.event != "log"
            or (line_id is not None and line_id <= last_log)  # never a line twice
            or (replica is not None and event.data["replica"] != replica)
            or (attempt is not None and event.data["attempt"] != attempt)
        ):
            continue
        last_log = line_id or last_log
        emit_json(event.data) if as_json else print_log_line(event.data)


def _why_no_points(client: Any, job_id: int, filtered: bool) -> str:
    """None of the job's points were listed: filters that match none, or a job that
    reported nothing (and how its code would)."""
    if filtered and client.metrics(job_id, limit=1):
        return f"no metric points of job {job_id} match these filters"
    job = client.job(job_id)
    finished = job["status"] in TERMINAL_STATUSES
    return no_metrics_hint(job_id, job["trainer"], finished=finished)


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
    client = connect(url, token)
    points = guarded(lambda: client.metrics(job_id, **params))
    if as_json:
        emit_json(points)
        return
    if not points:
        hint = guarded(lambda: _why_no_points(client, job_id, filtered=bool(params)))
        err.print(hint, highlight=False)
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
