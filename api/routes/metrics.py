"""Routes for a job's metrics.

A point's REST view is its stored row's (services/wire/feed.py `MetricRow.payload`, what
the job's stream sends too), never a field list of its own."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import Field

from api.deps import CurrentJob, SessionDep, scoped
from api.params import NO_NUL, AttemptNumber, ReplicaIndex, Step
from services.auth.scopes import Scope
from services.jobs.schemas import MetricList, MetricPointRead
from services.telemetry import downsample, metrics
from services.wire.feed import MetricRow

router = APIRouter(prefix="/jobs", tags=["metrics"], dependencies=scoped(write=Scope.SUBMIT))


@router.get("/{job_id}/metrics")
def read_job_metrics(
    job: CurrentJob,
    session: SessionDep,
    name: Annotated[
        list[Annotated[str, Field(max_length=256, pattern=NO_NUL)]] | None, Query(max_length=64)
    ] = None,
    replica: ReplicaIndex = None,
    attempt: AttemptNumber = None,
    since_step: Step = None,
    limit: Annotated[int, Query(ge=1, le=100_000)] = 10_000,
    max_points: Annotated[int | None, Query(ge=10, le=100_000)] = None,
) -> MetricList:
    """Stored metric points, by attempt then step; filter by name, replica, attempt, step.
    `max_points` downsamples long runs: each series keeps its share as bucket means, and
    `last_id` says where the job's stream goes on from
    (`kinds=metric&last_event_id=<last_id>.0.0`)."""
    if max_points is not None:
        # Read first: a point stored during the read is then in the stream after last_id
        # (and perhaps in a bucket too), never in neither.
        last_id = metrics.newest_point_id(session=session, job_id=job.id)
        points = downsample.read_metrics_downsampled(
            session=session,
            job_id=job.id,
            max_points=max_points,
            names=name,
            replica=replica,
            attempt=attempt,
            since_step=since_step,
        )
        return MetricList(items=[MetricPointRead(**p) for p in points], last_id=last_id)
    rows = metrics.read_metrics(
        session=session,
        job_id=job.id,
        names=name,
        replica=replica,
        attempt=attempt,
        since_step=since_step,
        limit=limit,
    )
    return MetricList(items=[MetricPointRead(**MetricRow.of(r).payload()) for r in rows])
