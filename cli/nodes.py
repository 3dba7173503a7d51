"""`cohort node list|drain|undrain`: the registered nodes, their slots, running replicas
and cordons; a node drained (its gangs checkpoint and move elsewhere) and undrained."""

from __future__ import annotations

from typing import Annotated, Any

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
            "cordon": _cordon,
            "slots": lambda n: n["slots"],
            "free": lambda n: n["free_slots"],
            "GPUs": lambda n: n["gpus"],
            "replicas": lambda n: n["running_replicas"],
            "last heartbeat": lambda n: n["last_heartbeat"][:19],
        },
        as_json=as_json,
        output=output,
    )


def _cordon(node: Any) -> str:
    """A node's cordon and why ("drain: kernel upgrade (by admin)"); "" when it has none."""
    if not node.get("cordon"):
        return ""
    reason = node.get("cordon_reason") or ""
    return f"{node['cordon']}: {reason}" if reason else str(node["cordon"])


NodeArg = Annotated[str, typer.Argument(help="the node's id, as `cohort node list` shows it")]


@app.command("drain")
def drain_node(
    node_id: NodeArg,
    reason: Annotated[str, typer.Option(help="why, shown with the node's cordon")] = "",
    token: TokenOpt = None,
    url: UrlOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Drain a node (admin): it takes no new replicas; its gangs checkpoint now and move
    to other nodes, resuming from that checkpoint."""
    node = guarded(lambda: connect(url, token).drain_node(node_id, reason))
    if as_json:
        emit_json(node)
        return
    console.print(f"node {node_id}: {_cordon(node)}; its gangs checkpoint and move elsewhere")


@app.command("undrain")
def undrain_node(
    node_id: NodeArg, token: TokenOpt = None, url: UrlOpt = None, as_json: JsonOpt = False
) -> None:
    """Lift a node's drain or quarantine (admin): it takes new replicas again."""
    node = guarded(lambda: connect(url, token).undrain_node(node_id))
    emit_json(node) if as_json else console.print(f"node {node_id}: takes replicas again")
