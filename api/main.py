"""The FastAPI application: REST v1, health probes, error mapping, token bootstrap."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

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
    metrics,
    nodes,
    quotas,
    schedules,
    sweep_pages,
    sweeps,
    tokens,
)
from api.security_headers import SecurityHeaders
from api.uploads import takes_upload
from services.auth.tokens import register_bootstrap
from services.db import session_scope
from services.jobs.uploads import clear_stale_uploads
from services.settings import get_settings

log = logging.getLogger(__name__)


def bootstrap() -> None:
    """Register COHORT_BOOTSTRAP_TOKEN as an admin token of project `default` (revoking
    the one it replaces; refused under 32 characters); clear the spool files of uploads
    an earlier api process did not finish."""
    settings = get_settings()
    clear_stale_uploads(settings=settings)
    token = settings.BOOTSTRAP_TOKEN
    if token:
        with session_scope() as session:
            row = register_bootstrap(session=session, token=token)
            if row.revoked_at is not None:
                log.warning("COHORT_BOOTSTRAP_TOKEN was revoked at %s and stays revoked: "
                            "set a new value to have an admin token", row.revoked_at)


@asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    bootstrap()
    yield


def create_app() -> FastAPI:
    """Build the application."""
    app = FastAPI(title="Cohort", version="0.1.0", lifespan=lifespan,
                  description="Distributed TensorFlow training jobs as a service.",
                  docs_url=None, redoc_url=None)  # /docs from vendored assets (api/docs.py)
    install_error_handlers(app)
    # Every request body is bounded (413 before it is read whole, chunked or not), but
    # uploads, which bound their own.
    app.add_middleware(BodyLimit, max_bytes=get_settings().MAX_REQUEST_BYTES,
                       exempt=takes_upload)
    # Outermost last: the headers go on every answer, the CSRF refusal's and the 413's too.
    app.add_middleware(SameOriginOnly)
    app.add_middleware(SecurityHeaders)
    docs.install(app)
    app.include_router(health.router)
    from api.routes import logs, prometheus, streams  # live metrics and logs (issue 5)

    app.include_router(prometheus.router)  # GET /metrics
    for stream_module in (logs, streams):
        app.include_router(stream_module.router, prefix="/api/v1")
    for module in (jobs, metrics, nodes):
        app.include_router(module.router, prefix="/api/v1")
    app.include_router(schedules.router, prefix="/api/v1")
    app.include_router(sweeps.router, prefix="/api/v1")  # sweeps (issue 17)
    app.include_router(quotas.router, prefix="/api/v1")  # projects' quotas (issue 14)
    for module in (bundles, artifacts, data):  # code, artifacts and data (issue 12)
        app.include_router(module.router, prefix="/api/v1")
    app.include_router(tokens.router, prefix="/api/v1")  # admins: tokens (issue 14)
    dashboard.install(app)  # the web dashboard at `/`, its assets at `/static`
    app.include_router(sweep_pages.router)  # its sweep pages
    install_openapi(app)  # last: it documents the routes included above
    return app


app = create_app()
