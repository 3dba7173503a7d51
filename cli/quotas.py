"""`cohort quota show|set`: a project's quota (admin tokens only)."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote

import typer
from rich.table import Table

from cli.options import JsonOpt, TokenOpt, UrlOpt, api, console, emit_json, err

app = typer.Typer(
    name="quota",
    help="Projects' quotas: queued jobs, running replicas, GPUs, schedules, "
    "priority ceiling (admin tokens only).",
    no_args_is_help=True,
)

# The API's limits, as option names (the order `show` prints them in).
LIMITS = ("max_queued_jobs", "max_running_replicas", "max_gpus", "max_schedules", "max_priority")
USED = {
    "max_queued_jobs": "queued_jobs",
    "max_running_replicas": "running_replicas",
    "max_gpus": "gpus",
    "max_schedules": "schedules",
}
ProjectArg = Annotated[str, typer.Argument(help="project name")]
LimitOpt = Annotated[
    str | None,
    typer.Option(help="a number, or 'default' for the cluster's default (COHORT_QUOTA_*)"),
]


def _path(project: str) -> str:
    return f"/api/v1/projects/{quote(project, safe='')}/quota"


def _text(value: Any) -> str:
    return "no limit" if value is None else str(value)


def _show(quota: dict[str, Any], as_json: bool) -> None:
    if as_json:
        emit_json(quota)
        return
    table = Table(
        "limit", "in force", "used", "project's own", "default", title=f"project {quota['project']}"
    )
    for name in LIMITS:
        used = quota["used"].get(USED.get(name, ""), "-")
        own = quota["overrides"][name]
        table.add_row(
            name,
            _text(quota["limits"][name]),
            str(used),
            "default" if own is None else str(own),
            _text(quota["defaults"][name]),
        )
    console.print(table)


def _limit(name: str, given: str) -> int | None:
    if given.strip().lower() == "default":
        return None
    try:
        return int(given)
    except ValueError:
        err.print(
            f"[red]--{name.replace('_', '-')}: {given!r} is not a number; give a "
            "whole number or 'default'[/]"
        )
        raise typer.Exit(2) from None


@app.command("show")
def show_quota(
    project: ProjectArg, token: TokenOpt = None, url: UrlOpt = None, as_json: JsonOpt = False
) -> None:
    """A project's limits, what it uses now, its own limits and the defaults."""
    _show(api(url, token, "GET", _path(project)), as_json)


@app.command("set")
def set_quota(
    project: ProjectArg,
    max_queued_jobs: LimitOpt = None,
    max_running_replicas: LimitOpt = None,
    max_gpus: LimitOpt = None,
    max_schedules: LimitOpt = None,
    max_priority: LimitOpt = None,
    token: TokenOpt = None,
    url: UrlOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Change some of a project's limits; the others keep their current setting."""
    given = {
        "max_queued_jobs": max_queued_jobs,
        "max_running_replicas": max_running_replicas,
        "max_gpus": max_gpus,
        "max_schedules": max_schedules,
        "max_priority": max_priority,
    }
    changes = {name: _limit(name, value) for name, value in given.items() if value is not None}
    if not changes:
        err.print("[red]nothing to set: give at least one limit, e.g. --max-gpus 8[/]")
        raise typer.Exit(2)
    current = api(url, token, "GET", _path(project))["overrides"]
    _show(api(url, token, "PUT", _path(project), {**current, **changes}), as_json)
