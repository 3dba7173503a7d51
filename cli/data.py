"""A project's data from the command line: `cohort data push FILE PATH`, `cohort data list`,
`cohort data delete PATH`. A job names a file as `data/<PATH>` in its `inputs`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli.options import (
    FormatOpt,
    JsonOpt,
    ListFormat,
    TokenOpt,
    UrlOpt,
    connect,
    console,
    emit_json,
    guarded,
    print_listing,
)
from cli.transfers import transfer_bar

app = typer.Typer(
    name="data",
    help="The project's data in the artifact store (job `inputs`).",
    no_args_is_help=True,
)
PathArg = Annotated[str, typer.Argument(help="path in the project's data, e.g. digits/train.csv")]


@app.command("push")
def push(
    file: Annotated[Path, typer.Argument(help="the local file", exists=True, dir_okay=False)],
    path: PathArg,
    token: TokenOpt = None,
    url: UrlOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Upload FILE to PATH of the project's data (replacing what was there)."""
    with transfer_bar(f"uploading {file.name}", file.stat().st_size) as bar:
        stored = guarded(lambda: connect(url, token).upload_data(path, file, bar))
    if as_json:
        emit_json(stored)
    else:
        console.print(
            f"uploaded {file} to {stored['path']} ({stored['size']} bytes); a job "
            f"names it in its inputs as data/{stored['path']}",
            soft_wrap=True,
            markup=False,
        )


@app.command("list")
def list_data(
    token: TokenOpt = None,
    url: UrlOpt = None,
    as_json: JsonOpt = False,
    output: FormatOpt = ListFormat.table,
) -> None:
    """List the project's data: path and size (a job names a path as data/<path>)."""
    items = guarded(lambda: connect(url, token).data())
    print_listing(
        items,
        {"path": lambda i: i["path"], "size": lambda i: i["size"]},
        as_json=as_json,
        output=output,
    )


@app.command("delete")
def remove(
    path: PathArg, token: TokenOpt = None, url: UrlOpt = None, as_json: JsonOpt = False
) -> None:
    """Delete PATH of the project's data."""
    guarded(lambda: connect(url, token).delete_data(path))
    if as_json:
        emit_json({"deleted": path})
    else:
        console.print(f"deleted {path}")
