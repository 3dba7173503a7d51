"""`cohort node-key NODE_ID`: a node's key for its agent; and the start-up check that a
scheduler or an agent has the key it signs with (services/wire/signing.py)."""

from __future__ import annotations

from typing import Annotated

import typer

from services.settings import get_settings
from services.wire.signing import MissingKey, check_node_key, check_signing_key, node_key


def require_signing_key() -> None:
    """Stop the scheduler at start-up, in one line, without COHORT_SIGNING_KEY."""
    try:
        check_signing_key(get_settings().SIGNING_KEY)
    except MissingKey as exc:
        typer.echo(f"cohort: {exc}", err=True)
        raise typer.Exit(1) from None


def require_node_key() -> None:
    """Stop an agent at start-up, in one line, without a well-formed COHORT_NODE_KEY."""
    settings = get_settings()
    try:
        check_node_key(settings.NODE_KEY, settings.node_id)
    except MissingKey as exc:
        typer.echo(f"cohort: {exc}", err=True)
        raise typer.Exit(1) from None


def node_key_command(
    node_id: Annotated[str, typer.Argument(help="the node's COHORT_NODE_ID")],
) -> None:
    """Print NODE_ID's key, its agent's COHORT_NODE_KEY (needs COHORT_SIGNING_KEY)."""
    try:
        typer.echo(node_key(get_settings().SIGNING_KEY, node_id))
    except MissingKey as exc:
        typer.echo(f"cohort: {exc}", err=True)
        raise typer.Exit(1) from None


def register(app: typer.Typer) -> None:
    app.command("node-key")(node_key_command)
