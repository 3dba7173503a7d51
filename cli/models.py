"""`cohort model list | show NAME | register NAME --job ID | alias NAME ALIAS --version N |
download NAME@ALIAS -o DIR`: the model registry (a version is `NAME:VERSION` or
`NAME@ALIAS`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from cli.artifacts import save_download
from cli.options import (
    FormatOpt,
    JsonOpt,
    ListFormat,
    TokenOpt,
    UrlOpt,
    connect,
    console,
    emit_json,
    err,
    guarded,
    print_listing,
)
from cohort import api_models as m
from cohort.registry import parse_ref

app = typer.Typer(
    name="model",
    help="The model registry: versions of trained models, aliases (production, ...).",
    no_args_is_help=True,
)
NameArg = Annotated[str, typer.Argument(help="the model's name")]


def _aliases(aliases: list[m.AliasRead]) -> str:
    return ", ".join(f"{a.name}->v{a.version}" for a in aliases) or "-"


@app.command("list")
def list_models(
    token: TokenOpt = None,
    url: UrlOpt = None,
    as_json: JsonOpt = False,
    output: FormatOpt = ListFormat.table,
) -> None:
    """List the project's models: latest version and aliases."""
    items = guarded(lambda: connect(url, token).models())
    columns = {
        "name": lambda item: item.name,
        "latest": lambda item: item.latest_version,
        "aliases": lambda item: _aliases(item.aliases),
        "updated": lambda item: f"{item.updated_at:%Y-%m-%d %H:%M}",
    }
    print_listing(items, columns, as_json=as_json, output=output)


@app.command("show")
def show_model(
    name: NameArg, token: TokenOpt = None, url: UrlOpt = None, as_json: JsonOpt = False
) -> None:
    """Show a model: its aliases and versions with their lineage (job, metrics)."""
    model = guarded(lambda: connect(url, token).model(name))
    if as_json:
        emit_json(model)
        return
    console.print(f"model [bold]{model.name}[/]: aliases {_aliases(model.aliases)}")
    table = Table("version", "aliases", "job", "metrics", "registered")
    for v in model.versions:
        metrics = ", ".join(
            f"{k}={val:.4g}" for k, val in sorted((v.lineage.metrics or {}).items())
        )
        table.add_row(
            f"v{v.version}",
            ", ".join(v.aliases or []) or "-",
            str(v.lineage.job_id),
            metrics or "-",
            f"{v.registered_at:%Y-%m-%d %H:%M} by {v.registered_by}",
        )
    console.print(table)


@app.command("register")
def register(
    name: NameArg,
    job: Annotated[int, typer.Option("--job", help="a succeeded job that saved a model")],
    token: TokenOpt = None,
    url: UrlOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Register a succeeded job's model as the model's next version."""
    version = guarded(lambda: connect(url, token).register_version(name, job))
    if as_json:
        emit_json(version)
    else:
        console.print(f"registered {version.model}:{version.version} from job {job}")


@app.command("alias")
def move_alias(
    name: NameArg,
    alias: Annotated[str, typer.Argument(help="e.g. production, staging")],
    version: Annotated[int, typer.Option("--version", help="the version it points at")],
    reason: Annotated[str, typer.Option("--reason", help="kept in its history")] = "",
    token: TokenOpt = None,
    url: UrlOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Point an alias at a version (made if new): promotion by hand, or a rollback."""
    moved = guarded(lambda: connect(url, token).move_alias(name, alias, version, reason))
    if as_json:
        emit_json(moved)
    else:
        console.print(f"{name}@{moved.name} -> v{moved.version}")


@app.command("download")
def download(
    ref: Annotated[str, typer.Argument(help="NAME:VERSION or NAME@ALIAS")],
    output: Annotated[Path, typer.Option("--output", "-o", help="directory to write")] = Path("."),
    token: TokenOpt = None,
    url: UrlOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Download a version's model into -o (unpacked and checked as artifacts are)."""
    try:
        parse_ref(ref)
    except ValueError as exc:
        err.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from exc
    client = connect(url, token)
    # An alias is resolved once: the files are the version it pointed at then, even if it
    # moves during the download.
    name, number = guarded(lambda: client.resolve(ref))
    written = save_download(
        lambda dest, bar: client.download_model(f"{name}:{number}", dest, bar)[1], "", output
    )
    if as_json:
        emit_json({"model": name, "version": number, "path": str(written)})
    else:
        console.print(f"wrote {name}:{number} to {written}")
