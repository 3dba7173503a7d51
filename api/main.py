"""The FastAPI application: REST v1, health probes, error mapping, token bootstrap."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import sqlalchemy as sa
from fastapi import FastAPI

from api import docs
from api.body_limit import BodyLimit
from api.csrf import SameOriginOnly
from api.errors import install_error_handlers
from api.openapi import install_openapi
from api.routes import (
    artifacts,
    bundles,
    dashboard,
    data,
    health,
    jobs,
    logs,
    metrics,
    model_files,
    models,
    nodes,
    projects,
    prometheus,
    schedules,
    streams,
    sweeps,
    tokens,
    validation,
    webhooks,
    whoami,
)
from api.security_headers import SecurityHeaders
from api.uploads import takes_upload
from services.auth.tokens import register_bootstrap
from services.db import session_scope
from services.jobs.uploads import clear_stale_uploads
from services.settings import get_settings
from services.startup_objects import freeze_startup_objects

log = logging.getLogger(__name__)


# Seconds between two tries at registering the bootstrap token while the database is
# unreachable (an api started before PostgreSQL, or during its restart).
BOOTSTRAP_RETRY = 1.0


def register_bootstrap_token() -> None:
    """Register COHORT_BOOTSTRAP_TOKEN as an admin token of project `default` (revoking
    the one it replaces; refused under 32 characters).

    Raises:
        sqlalchemy.exc.OperationalError: the database is unreachable.
    """
    token = get_settings().BOOTSTRAP_TOKEN
    if token:
        with session_scope() as session:
            row = register_bootstrap(session=session, token=token)
            if row.revoked_at is not None:
                log.warning(
                    "COHORT_BOOTSTRAP_TOKEN was revoked at %s and stays revoked: "
                    "set a new value to have an admin token",
                    row.revoked_at,
                )


async def register_when_reachable() -> None:
    """Try the bootstrap token's registration again until the database answers."""
    while True:
        await asyncio.sleep(BOOTSTRAP_RETRY)
        try:
            await anyio.to_thread.run_sync(register_bootstrap_token)
        except sa.exc.OperationalError:
            continue
        log.info("the database answers: COHORT_BOOTSTRAP_TOKEN registered")
        return


# How long a thread holding the GIL keeps it while another wants it (Python's default is
# 5 ms). The api's threads mostly wait on PostgreSQL; under a burst each wakes from a reply
# to find the GIL held by a thread parsing or serializing, and waited up to 5 ms per SQL
# round trip, which made the admission of grouped submissions (a dozen round trips in a
# row) slower than the work itself.
GIL_SWITCH_INTERVAL = 0.0005  # seconds


@asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    """Before serving: clear the spool files of uploads an earlier api process did not
    finish, and register the bootstrap token. An api started while the database is
    unreachable serves anyway (/healthz answers; /readyz, and every route that needs SQL,
    503 with Retry-After, as during an outage) and registers the token once it answers."""
    sys.setswitchinterval(GIL_SWITCH_INTERVAL)
    freeze_startup_objects()  # the app is built: its objects live as long as the process
    clear_stale_uploads(settings=get_settings())
    retrying: asyncio.Task[None] | None = None
    try:
        register_bootstrap_token()
    except sa.exc.OperationalError as exc:
        log.warning(
            "the database is unreachable (%s): serving anyway; COHORT_BOOTSTRAP_TOKEN "
            "is registered once it answers",
            exc.orig or exc,
        )
        retrying = asyncio.create_task(register_when_reachable())
    yield
    if retrying is not None:
        retrying.cancel()


# The REST API's routers, in the order their paths are matched (the live streams first).
API_V1 = (
    logs,
    streams,
    jobs,
    metrics,
    nodes,
    schedules,
    models,
    model_files,
    sweeps,
    projects,
    webhooks,
    bundles,
    artifacts,
    data,
    tokens,
    validation,
    whoami,
)


def create_app() -> FastAPI:
    """Build the application."""
    app = FastAPI(
        title="Cohort",
        version="0.1.0",
        lifespan=lifespan,
        description="Distributed TensorFlow training jobs as a service.",
        docs_url=None,
        redoc_url=None,
    )  # /docs from vendored assets (api/docs.py)
    install_error_handlers(app)
    # Every request body is bounded (413 before it is read whole, chunked or not), but
    # uploads, which bound their own.
    app.add_middleware(BodyLimit, max_bytes=get_settings().MAX_REQUEST_BYTES, exempt=takes_upload)
    # Outermost last: the headers go on every answer, the CSRF refusal's and the 413's too.
    app.add_middleware(SameOriginOnly)
    app.add_middleware(SecurityHeaders)
    docs.install(app)
    app.include_router(health.router)
    app.include_router(prometheus.router)  # GET /metrics
    app.include_router(jobs.submissions, prefix="/api/v1")  # POST /jobs (api/routes/jobs.py)
    for module in API_V1:
        app.include_router(module.router, prefix="/api/v1")
    dashboard.install(app)  # every page, login and logout, the assets at /static
    install_openapi(app)  # last: it documents the routes included above
    return app


app = create_app()
