"""The `cohort` command: run the processes, run the local stack, submit and follow jobs."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer

from cli.code import register as register_code_commands
from cli.commands import register as register_job_commands
from cli.data import register as register_data_commands
from cli.health import health
from cli.keys import register as register_key_commands
from cli.keys import require_node_key, require_signing_key
from cli.options import (
    JsonOpt,
    TokenOpt,
    UrlOpt,
    connect,
    console,
    err,
    guarded,
    load_spec,
)
from cli.quotas import app as quotas_app
from cli.schedules import app as schedules_app
from cli.sweeps import app as sweeps_app
from cli.tokens import register as register_token_commands
from services.auth.scopes import Scope
from services.data_dir import PROCESS_UMASK
from services.settings import get_settings

app = typer.Typer(
    help="Cohort: distributed TensorFlow training jobs as a service.",
    no_args_is_help=True,
    add_completion=False,
)
app.command()(health)

# The commands that run Cohort's own processes, or write its database: what they (and
# every process they start: uvicorn's workers, the stack's children, the embedded Redis)
# create is their user's alone, on a host where replicas run as other users
# (services/data_dir.py). Not the client's commands: a model `cohort download` writes
# into a user's directory gets the user's usual mode.
SERVICE_COMMANDS = frozenset({"api", "scheduler", "agent", "migrate", "up", "demo", "create-token"})


@app.callback()
def main(ctx: typer.Context) -> None:
    """Cohort: distributed TensorFlow training jobs as a service."""
    if ctx.invoked_subcommand in SERVICE_COMMANDS:
        os.umask(PROCESS_UMASK)


DEMO_JOB: dict[str, Any] = {
    "name": "demo-mlp-digits",
    "trainer": "mlp_digits",
    "strategy": "multi_worker_mirrored",
    "replicas": 2,
    "hyperparameters": {
        "epochs": 5,
        "steps_per_epoch": 20,
        "batch_size": 32,
        "learning_rate": 0.01,
    },
}


def _logging() -> None:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def _sigterm_as_interrupt() -> None:
    def handler(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def _exit_at_once(code: int = 0) -> None:
    """End a service that has shut down cleanly without the interpreter's teardown.

    By now its connections are closed and its work handed over (an agent's replicas
    stopped, a scheduler's lock released, the api's requests answered); what is left is
    freeing every object of every module it imported, 0.2-0.5 s of CPU that every stop
    of every service waited for (docs/benchmarks.md, "A stack's start and stop"). Logs
    and standard streams are flushed first."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _require_redis() -> None:
    """Stop a service at start-up, in one line, if Redis refuses it (a wrong password,
    a certificate it cannot check) or stays unreachable."""
    from services.wire.client import RedisUnavailable, check_redis, get_redis

    try:
        check_redis(get_redis(), get_settings().redis_url)
    except RedisUnavailable as exc:
        typer.echo(f"cohort: {exc}", err=True)  # one line, never wrapped
        raise typer.Exit(1) from None


@app.command()
def api(host: str | None = None, port: int | None = None) -> None:
    """Run the REST API (uvicorn)."""
    import uvicorn

    from services.auth.tokens import check_bootstrap_token
    from services.exceptions import WeakBootstrapToken

    settings = get_settings()
    try:
        check_bootstrap_token(settings.BOOTSTRAP_TOKEN)
    except WeakBootstrapToken as exc:
        typer.echo(f"cohort: {exc}", err=True)  # one line, never wrapped
        raise typer.Exit(1) from None
    _require_redis()
    # uvicorn would believe X-Forwarded-For and -Proto from 127.0.0.1 unless told: from
    # any process of this host, a replica's too, which could then pick the address the
    # login throttle counts (api/login_throttle.py). No proxy is trusted unless the
    # operator lists it.
    proxies = os.environ.get("FORWARDED_ALLOW_IPS", "").strip()
    uvicorn.run(
        "api.main:app",
        host=host or settings.API_HOST,
        port=port or settings.API_PORT,
        log_level="warning",
        access_log=False,
        workers=settings.API_WORKERS,
        proxy_headers=bool(proxies),
        forwarded_allow_ips=proxies or None,
    )
    _exit_at_once()


@app.command()
def scheduler() -> None:
    """Run the scheduler: placement, reconciliation, metric ingest (one active at a time)."""
    from workers.control.scheduler import run_scheduler

    require_signing_key()
    _logging()
    _require_redis()
    _sigterm_as_interrupt()
    run_scheduler()
    _exit_at_once()


@app.command()
def agent() -> None:
    """Run this machine's node agent (a Celery worker on its own queue)."""
    from workers.node.agent_process import run_agent
    from workers.node.data_dir_lock import DataDirInUse
    from workers.node.isolation import IsolationUnavailable

    require_node_key()
    _logging()
    _require_redis()
    try:
        run_agent()
    except (IsolationUnavailable, DataDirInUse) as exc:
        typer.echo(f"cohort: {exc}", err=True)  # one line: what to fix
        raise typer.Exit(1) from None
    _exit_at_once()


@app.command()
def migrate() -> None:
    """Apply database migrations up to the newest."""
    from cli.stack import migrate as run_migrations

    run_migrations(get_settings().database_url)
    console.print("database is at the newest migration")


@app.command()
def up() -> None:
    """Run the whole stack in the foreground (Ctrl-C stops all of it)."""
    from cli.stack import Stack
    from services.exceptions import WeakBootstrapToken

    _sigterm_as_interrupt()
    stack = Stack()
    try:
        stack.start()
        console.print(f"[green]Cohort is up[/]: API and docs at {stack.url}/docs")
        console.print(f"token: {stack.token}  (also in {get_settings().data_dir}/bootstrap-token)")
        stack.wait()
    except KeyboardInterrupt:
        console.print("stopping…")
    except WeakBootstrapToken as exc:
        typer.echo(f"cohort: {exc}", err=True)
        raise typer.Exit(1) from None
    finally:
        stack.stop()


@app.command()
def demo() -> None:
    """Start the stack, run a 2-replica MultiWorkerMirroredStrategy job, show it, stop."""
    from cli.client import CohortClient
    from cli.follow import follow_job
    from cli.stack import Stack

    _sigterm_as_interrupt()
    stack = Stack(quiet=True)
    code = 1
    try:
        console.print("starting Cohort (embedded SQLite + Redis, api, scheduler, one agent)…")
        stack.start()
        console.print(f"dashboard/API: {stack.url}  (docs: {stack.url}/docs)")
        client = CohortClient(stack.url, stack.token)
        job = client.submit(DEMO_JOB, idempotency_key=f"demo-{uuid.uuid4()}")
        console.print(f"submitted job {job['id']}: 2 replicas of mlp_digits")
        job = follow_job(client, job["id"], console)
        code = _report(client, job)
    except KeyboardInterrupt:
        err.print("interrupted")
    except Exception as exc:
        err.print(f"[red]demo failed:[/] {exc}")
    finally:
        stack.stop()
    raise typer.Exit(code)


def _report(client: Any, job: dict[str, Any]) -> int:
    if job["status"] != "succeeded":
        err.print(f"[red]job {job['id']} {job['status']}:[/] {job['reason']}")
        return 1
    evals = {
        p["name"]: p["value"]
        for p in client.metrics(job["id"], replica=0, name=["eval_accuracy", "eval_loss"])
    }
    for replica in job["replica_list"]:
        console.print(
            f"  replica {replica['index']} on {replica['node_id']} "
            f"({replica['address']}): exit {replica['exit_code']}"
        )
    if len(evals) == 2:  # the built-in trainer's held-out evaluation
        console.print(
            f"[green]job {job['id']} succeeded[/]: held-out accuracy "
            f"{evals['eval_accuracy']:.3f}, loss {evals['eval_loss']:.4f}"
        )
        return 0
    losses = client.metrics(job["id"], replica=0, name=["loss"], attempt=job["attempt"])
    last = f": last loss {losses[-1]['value']:.4f} at step {losses[-1]['step']}" if losses else ""
    console.print(f"[green]job {job['id']} succeeded[/]{last}")
    return 0


@app.command()
def submit(
    spec_file: Annotated[
        Path, typer.Argument(help="job spec (YAML or JSON)", exists=True, dir_okay=False)
    ],
    code: Annotated[
        Path | None,
        typer.Option(
            "--code",
            help="a directory to pack (honouring .cohortignore) and run the job in",
            exists=True,
            file_okay=False,
        ),
    ] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f")] = False,
    token: TokenOpt = None,
    url: UrlOpt = None,
    idempotency_key: str | None = None,
    as_json: JsonOpt = False,
) -> None:
    """Submit a job from a spec file; with --code, upload that directory first (once: an
    unchanged one is not sent again); with --follow, show progress and exit with its outcome."""
    from cli.code import push_bundle
    from cli.follow import follow_job

    spec = load_spec(spec_file, "job")
    client = connect(url, token)
    if code is not None:
        spec["bundle"] = guarded(
            lambda: push_bundle(client, code, err if as_json else console)
        ).digest
    job = guarded(lambda: client.submit(spec, idempotency_key=idempotency_key))
    if as_json and not follow:
        console.print_json(json.dumps(job))
        return
    (err if as_json else console).print(f"submitted job {job['id']} ({job['status']})")
    if follow:
        job = follow_job(client, job["id"], err if as_json else console)
        if as_json:  # the final job on stdout, the exit code says how it ended
            console.print_json(json.dumps(job))
            raise typer.Exit(0 if job["status"] == "succeeded" else 1)
        raise typer.Exit(_report(client, job))


@app.command("create-token")
def create_token(
    project: str = "default",
    name: str = "cli",
    scope: Annotated[list[Scope], typer.Option(help="repeat for several")] = [  # noqa: B006
        Scope.READ,
        Scope.SUBMIT,
    ],
) -> None:
    """Issue a token straight in the database (needs its credentials; with an admin token,
    `cohort tokens create` does it over the API)."""
    from services.auth import tokens
    from services.auth.schemas import TokenCreate
    from services.db import session_scope

    token_in = TokenCreate(project=project, name=name, scopes=scope)
    with session_scope() as session:
        created = tokens.create_token(session=session, token_in=token_in)
    console.print(created.token)


register_key_commands(app)
app.add_typer(schedules_app, name="schedules")
app.add_typer(sweeps_app, name="sweep")
app.add_typer(quotas_app, name="quota")


register_job_commands(app)  # jobs, get, logs, metrics, cancel, nodes
register_code_commands(app)  # bundle push, artifacts, download
register_data_commands(app)  # data push, ls, rm
register_token_commands(app)  # tokens list, create, revoke


if __name__ == "__main__":
    app()
