"""The commands that run Cohort's own processes or write its database: `cohort api`,
`scheduler`, `agent`, `migrate`, `up`, `demo`, `create-token`."""

from __future__ import annotations

import logging
import os
import signal
import sys
import uuid
from typing import Annotated, Any

import typer

from cli.keys import require_node_key, require_signing_key
from cli.options import console, err
from services.auth.scopes import Scope
from services.settings import get_settings

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


def scheduler() -> None:
    """Run the scheduler: placement, reconciliation, metric ingest (one active at a time)."""
    from workers.control.scheduler import run_scheduler

    require_signing_key()
    _logging()
    _require_redis()
    _sigterm_as_interrupt()
    run_scheduler()
    _exit_at_once()


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


def migrate() -> None:
    """Apply database migrations up to the newest."""
    from cli.stack import migrate as run_migrations

    run_migrations(get_settings().database_url)
    console.print("database is at the newest migration")


def up() -> None:
    """Run the whole stack in the foreground (Ctrl-C stops all of it)."""
    from cli.stack import Stack
    from cli.stack_ports import StackPortTaken
    from cli.user_config import save_for_stack
    from services.exceptions import WeakBootstrapToken

    _sigterm_as_interrupt()
    stack = Stack()
    try:
        stack.start()
        console.print(f"[green]Cohort is up[/]: API and docs at {stack.url}/docs")
        console.print(f"token: {stack.token}  (also in {get_settings().data_dir}/bootstrap-token)")
        console.print(save_for_stack(stack.url, stack.token), soft_wrap=True)
        stack.wait()
    except KeyboardInterrupt:
        console.print("stopping…")
    except (WeakBootstrapToken, StackPortTaken) as exc:
        typer.echo(f"cohort: {exc}", err=True)  # one line: what to fix
        raise typer.Exit(1) from None
    finally:
        stack.stop()


def demo() -> None:
    """Start the stack, run a 2-replica MultiWorkerMirroredStrategy job, show it, stop."""
    from cli.follow import follow_job
    from cli.jobs import report
    from cli.stack import Stack
    from cohort.client import Client

    _sigterm_as_interrupt()
    stack = Stack(quiet=True)
    code = 1
    try:
        console.print("starting Cohort (embedded SQLite + Redis, api, scheduler, one agent)…")
        stack.start()
        console.print(f"dashboard/API: {stack.url}  (docs: {stack.url}/docs)")
        client = Client(stack.url, stack.token)
        job_id = client.submit(DEMO_JOB, idempotency_key=f"demo-{uuid.uuid4()}").id
        console.print(f"submitted job {job_id}: 2 replicas of mlp_digits")
        # The bars alone: the built-in trainer's own output is TensorFlow's start-up talk.
        code = report(client, follow_job(client, job_id, console, output=False))
    except KeyboardInterrupt:
        err.print("interrupted")
    except Exception as exc:
        err.print(f"[red]demo failed:[/] {exc}")
    finally:
        stack.stop()
    raise typer.Exit(code)


def create_token(
    project: str = "default",
    name: str = "cli",
    scope: Annotated[list[Scope], typer.Option(help="repeat for several")] = [  # noqa: B006
        Scope.READ,
        Scope.SUBMIT,
    ],
) -> None:
    """Issue a token straight in the database (needs its credentials; with an admin token,
    `cohort token create` does it over the API)."""
    from services.auth import tokens
    from services.auth.schemas import TokenCreate
    from services.db import session_scope

    token_in = TokenCreate(project=project, name=name, scopes=scope)
    with session_scope() as session:
        created = tokens.create_token(session=session, token_in=token_in)
    console.print(created.token)
