"""`cohort sweep ...`: create from a YAML spec, list, show, cancel; --follow on create and
show."""

from __future__ import annotations

from typing import Any

import typer
from rich.table import Table

from cli.options import (
    FollowOpt,
    FormatOpt,
    JsonOpt,
    ListFormat,
    SpecFile,
    TokenOpt,
    UrlOpt,
    api,
    connect,
    console,
    emit_json,
    err,
    guarded,
    load_spec,
    print_listing,
)
from cohort.client import Client

app = typer.Typer(
    name="sweep",
    help="Sweeps: many trials of one job over a search space, the best kept.",
    no_args_is_help=True,
)


def call(
    url: str | None, token: str | None, method: str, path: str, body: dict[str, Any] | None = None
) -> Any:
    """One request to /api/v1/sweeps; an API error is printed and exits with 2."""
    return api(url, token, method, f"/api/v1/sweeps{path}", body)


def _value(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def trials_table(sweep: dict[str, Any]) -> Table:
    """The trials of a sweep: index, job, status, parameters, objective value."""
    objective = sweep["objective"]
    table = Table(
        "trial",
        "job",
        "status",
        "parameters",
        f"{objective['metric']} ({objective['mode']})",
        "reason",
    )
    for trial in sweep.get("trials") or []:
        best = "[bold green]*[/] " if trial["job_id"] == sweep["best_job_id"] else ""
        params = ", ".join(
            f"{k}={_value(v) if isinstance(v, float) else v}"
            for k, v in trial["parameters"].items()
        )
        table.add_row(
            str(trial["index"]),
            str(trial["job_id"]),
            trial["status"],
            params,
            best + _value(trial["objective_value"]),
            trial["reason"] if trial["stopped_early"] or trial["status"] == "failed" else "",
        )
    return table


def show_sweep(sweep: dict[str, Any]) -> None:
    """A sweep's header line, its best trial and its trials."""
    counts = ", ".join(f"{n} {s}" for s, n in sorted(sweep["trial_counts"].items()))
    console.print(
        f"sweep {sweep['id']} [bold]{sweep['name']}[/]: {sweep['status']} - {sweep['reason']}"
    )
    console.print(
        f"  {sweep['trials_created']}/{sweep['trials_total']} trials created, at most "
        f"{sweep['max_concurrent']} at once; {counts or 'none yet'}"
    )
    if sweep["best_job_id"] is not None:
        console.print(
            f"  best: job {sweep['best_job_id']} = {_value(sweep['best_value'])} "
            f"{sweep['best_parameters']}"
        )
    console.print(trials_table(sweep))


@app.command("create")
def create_sweep(
    spec_file: SpecFile,
    follow: FollowOpt = False,
    token: TokenOpt = None,
    url: UrlOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a sweep from a YAML (or JSON) spec; prints its id. With --follow, a live
    table of its trials until it ends; exits 0 if it succeeded, 1 if not."""
    sweep = call(url, token, "POST", "", load_spec(spec_file, "sweep"))
    if as_json and not follow:
        emit_json(sweep)
        return
    (err if as_json else console).print(
        f"sweep {sweep['id']} created: {sweep['trials_total']} trials, at most "
        f"{sweep['max_concurrent']} at once"
    )
    if follow:
        follow_to_end(connect(url, token), sweep["id"], as_json)


@app.command("list")
def list_sweeps(
    token: TokenOpt = None,
    url: UrlOpt = None,
    as_json: JsonOpt = False,
    output: FormatOpt = ListFormat.table,
) -> None:
    """List the project's sweeps, newest first."""
    items = call(url, token, "GET", "")["items"]
    print_listing(
        items,
        {
            "id": lambda s: s["id"],
            "name": lambda s: s["name"],
            "status": lambda s: s["status"],
            "trials": lambda s: f"{s['trials_created']}/{s['trials_total']}",
            "best job": lambda s: s["best_job_id"] or "-",
            "best value": lambda s: _value(s["best_value"]),
            "reason": lambda s: s["reason"],
        },
        as_json=as_json,
        output=output,
    )


@app.command("show")
def show(
    sweep_id: int,
    follow: FollowOpt = False,
    token: TokenOpt = None,
    url: UrlOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """A sweep: its trials with parameters, status and objective value; the best. With
    --follow, a live table of the trials until the sweep ends; exits 0 if it succeeded."""
    if follow:
        follow_to_end(connect(url, token), sweep_id, as_json)
    sweep = call(url, token, "GET", f"/{sweep_id}")
    if as_json:
        emit_json(sweep)
        return
    show_sweep(sweep)


def follow_to_end(client: Client, sweep_id: int, as_json: bool) -> None:
    """A live table of the sweep's trials until it ends, then exit with its outcome (the
    final sweep on stdout with --json)."""
    from cli.sweep_follow import follow_sweep

    # One client for the whole follow; its polls raise transport errors to the follower
    # (which waits out an api restart), and only the last one exits 2.
    sweep = guarded(
        lambda: follow_sweep(
            lambda: client.request("GET", f"/api/v1/sweeps/{sweep_id}"),
            err if as_json else console,
        )
    )
    if as_json:
        emit_json(sweep)
    raise typer.Exit(0 if sweep["status"] == "succeeded" else 1)


@app.command("cancel")
def cancel(
    sweep_id: int, token: TokenOpt = None, url: UrlOpt = None, as_json: JsonOpt = False
) -> None:
    """Cancel a sweep and its queued and running trials."""
    sweep = call(url, token, "POST", f"/{sweep_id}/cancel")
    if as_json:
        emit_json(sweep)
        return
    console.print(f"sweep {sweep['id']} {sweep['status']}")
