"""Routes for a job's logs (each replica's stdout and stderr, kept per attempt)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from api.deps import CurrentJob, SessionDep, scoped
from api.params import AttemptNumber, ReplicaIndex
from services.auth.scopes import Scope
from services.jobs.schemas import LogLineRead, LogList
from services.telemetry import logs

router = APIRouter(prefix="/jobs", tags=["logs"], dependencies=scoped(write=Scope.SUBMIT))


@router.get("/{job_id}/logs")
def read_job_logs(
    job: CurrentJob,
    session: SessionDep,
    replica: ReplicaIndex = None,
    attempt: AttemptNumber = None,
    tail: Annotated[int | None, Query(ge=1, le=100_000)] = None,
    limit: Annotated[int, Query(ge=1, le=100_000)] = 10_000,
) -> LogList:
    """Log lines with the time they were read, oldest first; `tail` keeps the last n.
    Follow them live with `GET /jobs/{id}/stream?kinds=log`."""
    rows = logs.read_logs(
        session=session, job_id=job.id, replica=replica, attempt=attempt, tail=tail, limit=limit
    )
    return LogList(
        items=[
            LogLineRead(
                id=r.id, attempt=r.attempt, replica=r.replica, seq=r.seq, ts=r.ts, line=r.line
            )
            for r in rows
        ]
    )
