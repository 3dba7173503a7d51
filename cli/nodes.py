"""`cohort node list`: the registered nodes, their slots and running replicas."""

from __future__ import annotations

import typer
from rich.table import Table

from cli.options import (
    FormatOpt,
    JsonOpt,
    ListFormat,
    TokenOpt,
    UrlOpt,
    connect,
    console,
    emit_as,
    guarded,
)

app = typer.Typer(name="node", help="Nodes: the machines replicas run on.", no_args_is_help=True)


@app.command("list")
def list_nodes(
    token: TokenOpt = None,
    url: UrlOpt = None,
    as_json: JsonOpt = False,
    output: FormatOpt = ListFormat.table,
) -> None:
    """List the registered nodes with their slots and running replicas."""
    nodes = guarded(lambda: connect(url, token).nodes())
    if as_json or output != "table":
        emit_as(nodes, "json" if as_json else output)
        return
    table = Table(
        "node", "address", "status", "slots", "free", "GPUs", "replicas", "last heartbeat"
    )
    for n in nodes:
        table.add_row(
            n["id"],
            n["address"],
            "inventory pending" if n["status"] == "pending" else n["status"],
            str(n["slots"]),
            str(n["free_slots"]),
            str(n["gpus"]),
            str(n["running_replicas"]),
            n["last_heartbeat"][:19],
        )
    console.print(table)
