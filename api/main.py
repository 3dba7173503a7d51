"""The FastAPI application: REST v1, health probes, error mapping, token bootstrap."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from api.errors import install_error_handlers
from api.routes import artifacts, bundles, dashboard, health, jobs, metrics, nodes, schedules
from services import auth
from services.db import session_scope
from services.exceptions import BundleTooLarge, InvalidArtifactPath, InvalidBundle
from services.jobs.bundles import clear_stale_uploads
from services.settings import get_settings


def bootstrap() -> None:
    """Register COHORT_BOOTSTRAP_TOKEN as an admin token of project `default`; clear the
    spool files of uploads an earlier api process did not finish."""
    settings = get_settings()
    clear_stale_uploads(settings=settings)
    token = settings.BOOTSTRAP_TOKEN
    if token:
        with session_scope() as session:
            auth.ensure_token(session=session, token=token)


@asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    bootstrap()
    yield


def create_app() -> FastAPI:
    """Build the application."""
    app = FastAPI(title="Cohort", version="0.1.0", lifespan=lifespan,
                  description="Distributed TensorFlow training jobs as a service.")
    install_error_handlers(app)
    app.include_router(health.router)
    from api.routes import logs, prometheus, streams  # live metrics and logs (issue 5)

    app.include_router(prometheus.router)  # GET /metrics
    for stream_module in (logs, streams):
        app.include_router(stream_module.router, prefix="/api/v1")
    for module in (jobs, metrics, nodes):
        app.include_router(module.router, prefix="/api/v1")
    app.include_router(schedules.router, prefix="/api/v1")
    for module in (bundles, artifacts):  # code bundles and artifacts (issue 12)
        app.include_router(module.router, prefix="/api/v1")
    _install_storage_error_handlers(app)
    dashboard.install(app)  # the web dashboard at `/`, its assets at `/static`
    return app


# -- issue 12's domain errors, until api/errors.py maps them with the others ---------------

def _install_storage_error_handlers(app: FastAPI) -> None:
    def answer(status: int, code: str, message: str, field: str | None) -> JSONResponse:
        extra = {"fields": [{"field": field, "message": message}]} if field else {}
        return JSONResponse(status_code=status,
                            content={"error": code, "message": message, **extra})

    @app.exception_handler(BundleTooLarge)
    async def _too_large(_: Request, exc: BundleTooLarge) -> JSONResponse:
        return answer(413, "too_large", str(exc), None)

    @app.exception_handler(InvalidBundle)
    async def _bundle(_: Request, exc: InvalidBundle) -> JSONResponse:
        return answer(422, "invalid_request", str(exc), exc.field)

    @app.exception_handler(InvalidArtifactPath)
    async def _artifact_path(_: Request, exc: InvalidArtifactPath) -> JSONResponse:
        return answer(422, "invalid_request", str(exc), "path")


app = create_app()
