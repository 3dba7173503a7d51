"""`cohort node list`: the registered nodes, their slots and running replicas."""

from __future__ import annotations

import typer

from cli.options import (
    FormatOpt,
    JsonOpt,
    ListFormat,
    TokenOpt,
    UrlOpt,
    connect,
    guarded,
    print_listing,
)

app = typer.Typer(name="node", help="Nodes: the machines replicas run on.", no_args_is_help=True)


@app.command("list")
def list_nodes(
    token: TokenOpt = None,
    url: UrlOpt = None,
    as_json: JsonOpt = False,
    output: FormatOpt = ListFormat.table,
) -> None:
    """List the registered nodes with their slots, running replicas and cordon (drained or
    quarantined: they take no new replicas)."""
    nodes = guarded(lambda: connect(url, token).nodes())
    print_listing(
        nodes,
        {
            "node": lambda n: n["id"],
            "address": lambda n: n["address"],
            "status": lambda n: "inventory pending" if n["status"] == "pending" else n["status"],
            "slots": lambda n: n["slots"],
            "free": lambda n: n["free_slots"],
            "GPUs": lambda n: n["gpus"],
            "replicas": lambda n: n["running_replicas"],
            # Drained or quarantined (why: --json's cordon_reason, the cluster page).
            "cordon": lambda n: n.get("cordon") or "",
            "last heartbeat": lambda n: n["last_heartbeat"][:19],
        },
        as_json=as_json,
        output=output,
    )
