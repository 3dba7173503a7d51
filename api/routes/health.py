"""Liveness and readiness probes."""

from __future__ import annotations

import logging

import sqlalchemy as sa
from fastapi import APIRouter
from fastapi.responses import JSONResponse

from services.db import get_engine
from services.wire.client import get_redis

router = APIRouter(tags=["health"])
log = logging.getLogger(__name__)


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up."""
    # On the event loop, not in the thread pool: the probe must answer while every
    # worker thread is busy with SQL (a burst of streams starting reads their history).
    return {"status": "ok"}


def _database() -> None:
    with get_engine().connect() as connection:
        connection.execute(sa.text("SELECT 1"))


def _redis() -> None:
    get_redis().ping()


# Each dependency, how to check it, and what the probe says when it fails. The answer
# names what is down, never the exception: that goes to the api's log, where an operator
# looks, not to whoever can reach the probe.
CHECKS = {"database": (_database, "database unreachable"), "redis": (_redis, "redis unreachable")}


@router.get("/readyz")
def readyz() -> JSONResponse:
    """Ready only when both SQL and Redis answer; otherwise says which is down."""
    checks: dict[str, str] = {}
    for name, (check, down) in CHECKS.items():
        try:
            check()
            checks[name] = "ok"
        except Exception:  # any failure means not ready; the log says why
            log.warning("readiness: %s", down, exc_info=True)
            checks[name] = down
    ready = all(v == "ok" for v in checks.values())
    return JSONResponse(
        status_code=200 if ready else 503,
        content={"status": "ready" if ready else "not ready", **checks},
    )
