"""What every API command of the CLI shares: its options, one guarded call, spec files.

A command takes its address from `--url`, `COHORT_URL` or the per-user config, and its
token from `--token`, `COHORT_TOKEN`, the per-user config or the local stack
(cli/user_config.py); an API error is printed on stderr and exits 2, a refused token
saying where it came from.
"""

from __future__ import annotations

import enum
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import httpx
import typer
import yaml
from pydantic_core import to_jsonable_python
from rich.console import Console
from rich.table import Table

from cli.user_config import resolve
from cohort.client import Client
from cohort.errors import ApiError
from cohort.specs import SpecFileError, load_spec_file

console = Console()
err = Console(stderr=True)

TokenOpt = Annotated[str | None, typer.Option(envvar="COHORT_TOKEN", help="API token")]
UrlOpt = Annotated[str | None, typer.Option(envvar="COHORT_URL", help="API address")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print the API's JSON (for scripts)")]
FollowOpt = Annotated[
    bool,
    typer.Option(
        "--follow", "-f", help="show progress until it ends; exit 0 if it succeeded, 1 if not"
    ),
]
OutputOpt = Annotated[
    bool,
    typer.Option(
        "--logs/--no-logs",
        help="with --follow: print the replicas' output as it comes, each line after its "
        "replica ([r0])",
    ),
]


class ListFormat(enum.StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


FormatOpt = Annotated[
    ListFormat,
    typer.Option(
        "--output", help="table (for people), json or yaml (for scripts; --json is --output json)"
    ),
]
JobArg = Annotated[int, typer.Argument(help="job id")]
SpecFile = Annotated[Path, typer.Argument(exists=True, dir_okay=False)]
T = TypeVar("T")


def connect(url: str | None, token: str | None) -> Client:
    """A client of the API these options (or the config) name, with its token's source."""
    found = resolve(url, token)
    return Client(found.url, found.token, token_source=found.token_source)


def guarded(fn: Callable[[], T]) -> T:
    """Run one API call; an API error, or an API that cannot be reached, is printed in
    one line and exits 2."""
    try:
        return fn()
    except ApiError as exc:
        err.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from exc
    except httpx.TransportError as exc:
        try:
            where = str(exc.request.url.copy_with(path="/", query=None))
        except RuntimeError:  # raised before a request was made
            where = "the API"
        err.print(f"[red]cannot reach {where}: {exc}[/] (is it running? set --url or COHORT_URL)")
        raise typer.Exit(2) from exc


def api(
    url: str | None, token: str | None, method: str, path: str, body: dict[str, Any] | None = None
) -> Any:
    """One request to `path` under the API; its JSON (None for 204), errors exit 2."""
    return guarded(lambda: connect(url, token).request(method, path, body))


def load_spec(spec_file: Path, what: str) -> dict[str, Any]:
    """A YAML (or JSON) file holding one mapping, e.g. a schedule or sweep spec."""
    try:
        return load_spec_file(spec_file, what)
    except SpecFileError as exc:
        err.print(f"[red]{exc}[/]")
        raise typer.Exit(2) from exc


def emit_as(value: Any, fmt: str) -> None:
    """A listing in a machine-readable format (`--output json|yaml`): the API's JSON."""
    if fmt == "yaml":
        sys.stdout.write(yaml.safe_dump(to_jsonable_python(value), sort_keys=False))
        sys.stdout.flush()
    else:
        emit_json(value)


Cell = Callable[[Any], object]


def print_listing(
    items: list[Any],
    columns: dict[str, Cell],
    *,
    as_json: bool,
    output: str,
    whole: Any = None,
) -> None:
    """A listing command's output: the API's JSON (`--json`, `--output json|yaml`: `whole`
    when the answer is more than its items, a page with its cursor) or a table, a column a
    header and the cell it shows of an item."""
    if as_json or output != "table":
        emit_as(items if whole is None else whole, "json" if as_json else output)
        return
    table = Table(*columns)
    for item in items:
        table.add_row(*(str(cell(item)) for cell in columns.values()))
    console.print(table)


def emit_json(value: Any) -> None:
    """Machine-readable output (`--json`): one JSON document on stdout."""
    sys.stdout.write(json.dumps(to_jsonable_python(value)) + "\n")
    sys.stdout.flush()
