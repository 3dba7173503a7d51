"""The `cohort` app: every command and group registered in one place, one way.

A top-level command is a plain function listed in COMMANDS; a group is a module holding
`app = typer.Typer(name=NOUN, ...)` with one `@app.command(VERB)` per command, listed in
GROUPS. A group is named by one singular noun (`cohort job list`, `cohort sweep create`);
docs/cli-guide.md says why and which verbs to use.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Callable
from typing import Annotated, Any

import typer

from cli import (
    artifacts,
    bundles,
    data,
    jobs,
    models,
    nodes,
    processes,
    quotas,
    schedules,
    sweeps,
    tokens,
    webhooks,
)
from cli.aliases import AliasedGroup
from cli.health import health
from cli.keys import node_key_command, redis_acl_command
from cli.login import login
from cli.run import run
from cli.tensorboard import tensorboard
from services.data_dir import PROCESS_UMASK

app = typer.Typer(
    cls=AliasedGroup,
    help="Cohort: distributed TensorFlow training jobs as a service.",
    no_args_is_help=True,
    # `cohort --install-completion` installs completion for the user's shell (bash, zsh,
    # fish, PowerShell); `--show-completion` prints it.
    add_completion=True,
)

# The commands that run Cohort's own processes, or write its database, then the tools
# an operator runs beside them; last, the client commands at the top: `run`, a job from a
# command line, the first thing a user types, and `tensorboard`, the jobs' TensorBoard
# files in a TensorBoard of the user's own (docs/cli-guide.md).
COMMANDS: tuple[tuple[str, Callable[..., Any]], ...] = (
    ("api", processes.api),
    ("scheduler", processes.scheduler),
    ("agent", processes.agent),
    ("migrate", processes.migrate),
    ("up", processes.up),
    ("demo", processes.demo),
    ("create-token", processes.create_token),
    ("health", health),
    ("login", login),
    ("node-key", node_key_command),
    ("redis-acl", redis_acl_command),
    ("run", run),
    ("tensorboard", tensorboard),
)
# The client's groups, one per thing the REST API serves.
GROUPS: tuple[typer.Typer, ...] = (
    jobs.app,
    sweeps.app,
    schedules.app,
    models.app,
    artifacts.app,
    bundles.app,
    data.app,
    nodes.app,
    quotas.app,
    tokens.app,
    webhooks.app,
)
# What those commands (and every process they start: uvicorn's workers, the stack's
# children, the embedded Redis) create is their user's alone, on a host where replicas
# run as other users (services/data_dir.py). Not the client's commands: a model
# `cohort artifact download` writes into a user's directory gets the user's usual mode.
SERVICE_COMMANDS = frozenset({"api", "scheduler", "agent", "migrate", "up", "demo", "create-token"})


def _version(asked: bool) -> None:
    if asked:
        typer.echo(f"cohort {importlib.metadata.version('cohort')}")
        raise typer.Exit()


@app.callback()
def main(
    ctx: typer.Context,
    version: Annotated[  # noqa: ARG001 - read by its callback (eager: before any command)
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="print the version"),
    ] = False,
) -> None:
    """Cohort: distributed TensorFlow training jobs as a service."""
    if ctx.invoked_subcommand in SERVICE_COMMANDS:
        os.umask(PROCESS_UMASK)


for name, command in COMMANDS:
    app.command(name)(command)
for group in GROUPS:
    app.add_typer(group)


if __name__ == "__main__":
    app()
