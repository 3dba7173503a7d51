"""`cohort schedule ...`: list, show, create, update, pause, resume, delete, run, model."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from cli.options import (
    FollowOpt,
    FormatOpt,
    JsonOpt,
    ListFormat,
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
from cohort.specs import with_bundle
from cohort.uploads import PENDING_BUNDLE

app = typer.Typer(
    name="schedule",
    help="Retraining schedules: cron or interval, concurrency rules, promotion.",
    no_args_is_help=True,
)


def _call(
    url: str | None, token: str | None, method: str, path: str, body: dict[str, Any] | None = None
) -> Any:
    return api(url, token, method, f"/api/v1/schedules{path}", body)


def _load(spec_file: Path) -> dict[str, Any]:
    return load_spec(spec_file, "schedule")


def _when(schedule: dict[str, Any]) -> str:
    parts = []
    if schedule["cron"]:
        parts.append(f"cron {schedule['cron']} ({schedule['timezone']})")
    elif schedule["interval_seconds"]:
        parts.append(f"every {schedule['interval_seconds']}s")
    trigger = schedule.get("trigger")
    if trigger:
        parts.append(f"on new {trigger['data']} (settled {trigger['settle_seconds']}s)")
    return " and ".join(parts)


def _show(schedule: dict[str, Any], as_json: bool) -> None:
    if as_json:
        emit_json(schedule)
        return
    state = "paused" if schedule["paused"] else f"next {schedule['next_fire_at'] or '-'}"
    console.print(
        f"schedule {schedule['id']} [bold]{schedule['name']}[/]: {_when(schedule)}, "
        f"{schedule['concurrency_policy']}, {state}"
    )
    if schedule.get("trigger"):
        console.print(
            f"  data version handled: {schedule['data_version'] or 'none yet'}"
            + (f" (changed {schedule['data_version_at']})" if schedule["data_version_at"] else "")
        )
    if schedule["promote"]:
        promote = schedule["promote"]
        console.print(
            f"  promote on {promote['metric']} ({promote['mode']}) to "
            f"{promote.get('model') or schedule['name']}@{promote.get('alias') or 'production'}: "
            f"job {schedule['promoted_job_id']} = {schedule['promoted_value']}"
        )
    if schedule.get("evaluate"):
        evaluate = schedule["evaluate"]
        how = (
            " ".join(evaluate["command"]) if evaluate["command"] else "the trainer's evaluate(ctx)"
        )
        console.print(f"  evaluated on {evaluate['data']} by {how}")
    table = Table(
        "fire time", "data version", "outcome", "job", "decision", "reason", "evaluations"
    )
    for run in schedule["recent_runs"]:
        table.add_row(
            run["scheduled_for"],
            (run.get("data_version") or "-")[:19],  # sha256: and 12 hex digits
            run["outcome"],
            str(run["job_id"] or "-"),
            run["decision"] or "-",
            run["decision_reason"] or run["reason"],
            _evaluations(run.get("evaluations") or []),
        )
    console.print(table)


def _evaluations(evaluations: list[dict[str, Any]]) -> str:
    """Each model a run's decision had evaluated: its value (or status), by which job."""
    return "\n".join(
        f"job {e['model_job_id']}: "
        + (f"{e['metric']}={e['value']:.4g}" if e["value"] is not None else e["status"])
        + f" (evaluation job {e['job_id'] or '-'}, {e['holdout_digest'][:15]})"
        for e in evaluations
    )


@app.command("list")
def list_schedules(
    token: TokenOpt = None,
    url: UrlOpt = None,
    as_json: JsonOpt = False,
    output: FormatOpt = ListFormat.table,
) -> None:
    """List the project's schedules."""
    items = _call(url, token, "GET", "")["items"]
    print_listing(
        items,
        {
            "id": lambda s: s["id"],
            "name": lambda s: s["name"],
            "when": _when,
            "policy": lambda s: s["concurrency_policy"],
            "next fire": lambda s: "paused" if s["paused"] else s["next_fire_at"],
            "last outcome": lambda s: s["last_outcome"],
            "promoted job": lambda s: s["promoted_job_id"] or "-",
        },
        as_json=as_json,
        output=output,
    )


@app.command("show")
def show_schedule(
    schedule_id: int,
    runs: int = 20,
    token: TokenOpt = None,
    url: UrlOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a schedule with its recent runs and promotion decisions."""
    _show(_call(url, token, "GET", f"/{schedule_id}?runs={runs}"), as_json)


@app.command("create")
def create_schedule(
    spec_file: Annotated[Path, typer.Argument(help="schedule spec (YAML/JSON)")],
    code: Annotated[
        Path | None,
        typer.Option(
            "--code",
            help="a directory to pack (honouring .cohortignore): the code its runs run",
            exists=True,
            file_okay=False,
        ),
    ] = None,
    token: TokenOpt = None,
    url: UrlOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a schedule from a spec file (name, job, cron, interval_seconds or trigger,
    ...); with --code, its runs run that directory's code (uploaded once)."""
    spec = _load(spec_file)
    if code is not None:
        try:
            with_bundle(spec, PENDING_BUNDLE)  # refused before anything is packed or sent
        except ValueError as exc:
            err.print(f"[red]{spec_file}: {exc}[/]")
            raise typer.Exit(2) from exc
        pushed = guarded(lambda: connect(url, token).push_code(code))
        spec = with_bundle(spec, pushed.digest)
    _show(_call(url, token, "POST", "", spec), as_json)


@app.command("update")
def update_schedule(
    schedule_id: int,
    spec_file: Annotated[Path, typer.Argument(help="fields to change")],
    token: TokenOpt = None,
    url: UrlOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Change a schedule: the fields in the file replace the stored ones."""
    _show(_call(url, token, "PATCH", f"/{schedule_id}", _load(spec_file)), as_json)


@app.command("pause")
def pause_schedule(
    schedule_id: int, token: TokenOpt = None, url: UrlOpt = None, as_json: JsonOpt = False
) -> None:
    """Stop firing until resumed."""
    _show(_call(url, token, "POST", f"/{schedule_id}/pause"), as_json)


@app.command("resume")
def resume_schedule(
    schedule_id: int, token: TokenOpt = None, url: UrlOpt = None, as_json: JsonOpt = False
) -> None:
    """Fire again from the next fire time."""
    _show(_call(url, token, "POST", f"/{schedule_id}/resume"), as_json)


@app.command("delete")
def delete_schedule(
    schedule_id: int, token: TokenOpt = None, url: UrlOpt = None, as_json: JsonOpt = False
) -> None:
    """Delete a schedule (its jobs stay)."""
    _call(url, token, "DELETE", f"/{schedule_id}")
    if as_json:
        emit_json({"deleted": schedule_id})
    else:
        console.print(f"deleted schedule {schedule_id}")


@app.command("run")
def run_schedule(
    schedule_id: int,
    follow: FollowOpt = False,
    token: TokenOpt = None,
    url: UrlOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run a schedule now, under its concurrency policy; with --follow, show the job (or
    sweep) it started until it ends and exit with its outcome."""
    run = _call(url, token, "POST", f"/{schedule_id}/trigger")
    if as_json and not follow:
        emit_json(run)
        return
    (err if as_json else console).print(f"{run['outcome']}: {run['reason']}")
    if not follow:
        return
    if run["job_id"] is not None:
        from cli.jobs import follow_to_end

        follow_to_end(connect(url, token), run["job_id"], as_json)
    if run["sweep_id"] is not None:
        from cli.sweeps import follow_to_end as follow_sweep_to_end

        follow_sweep_to_end(connect(url, token), run["sweep_id"], as_json)
    if as_json:  # nothing started (skipped under its policy): the run is the answer
        emit_json(run)
    raise typer.Exit(1)


@app.command("model")
def promoted_model(
    schedule_id: int, token: TokenOpt = None, url: UrlOpt = None, as_json: JsonOpt = False
) -> None:
    """Where the schedule's promoted model is."""
    model = _call(url, token, "GET", f"/{schedule_id}/model")
    if as_json:
        emit_json(model)
    else:
        console.print(
            f"job {model['job_id']}: {model['metric']}={model['value']} — "
            f"{model['path']} on node {model['node_id']}"
        )
