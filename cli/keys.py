"""`cohort node-key NODE_ID`: a node's key for its agent; `cohort redis-acl NODE_ID...`:
Redis ACL users per role (services/wire/acl.py); and the start-up check that a scheduler
or an agent has the key it signs with (services/wire/signing.py)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated

import typer

from services.settings import get_settings
from services.wire.acl import acl_file
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


def agent_password_variable(node_id: str) -> str:
    """The environment variable holding node `node_id`'s Redis password for the ACL."""
    return "REDIS_AGENT_PASSWORD_" + re.sub(r"[^A-Z0-9]", "_", node_id.upper())


def _password(variable: str) -> str:
    value = os.environ.get(variable, "")
    if not value:
        raise ValueError(f"{variable} is not set: the Redis password of that user")
    return value


def redis_acl_command(
    node_ids: Annotated[list[str], typer.Argument(help="the COHORT_NODE_ID of every agent")],
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="write the file here (mode 0644: it holds only password "
            "hashes) instead of printing it",
        ),
    ] = None,
) -> None:
    """Print a Redis ACL file: the control plane as `default` (REDIS_PASSWORD) and
    `agent-NODE_ID` per node (REDIS_AGENT_PASSWORD_<NODE_ID>, upper case, other characters
    as _). Replicas get no user: they report through their agent."""
    try:
        text = acl_file(
            control_password=_password("REDIS_PASSWORD"),
            agents={node: _password(agent_password_variable(node)) for node in node_ids},
        )
    except ValueError as exc:
        typer.echo(f"cohort: {exc}", err=True)
        raise typer.Exit(1) from None
    if output is None:
        typer.echo(text, nl=False)
        return
    output.write_text(text)
    output.chmod(0o644)


def register(app: typer.Typer) -> None:
    app.command("node-key")(node_key_command)
    app.command("redis-acl")(redis_acl_command)
