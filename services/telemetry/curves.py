"""One metric's curve for each of many jobs (a sweep's trials on one chart): each job's
current attempt on one replica, thinned from the rollups like any chart series."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.orm import Session

from services.models import Job
from services.telemetry.downsample import read_metrics_downsampled

CHART_POINTS = 4000  # across every curve of one chart


def read_curves(
    *,
    session: Session,
    jobs: Sequence[Job],
    name: str,
    replica: int = 0,
    max_points: int = CHART_POINTS,
) -> dict[int, list[tuple[int, float]]]:
    """Job id -> [(step, value)] of `name` on `replica` over the job's current attempt
    (jobs that have not reported it are left out)."""
    budget = max(20, max_points // max(1, len(jobs)))
    curves: dict[int, list[tuple[int, float]]] = {}
    for job in jobs:
        points = read_metrics_downsampled(
            session=session,
            job_id=job.id,
            max_points=budget,
            names=[name],
            replica=replica,
            attempt=job.attempt,
        )
        if points:
            curves[job.id] = [(p["step"], p["value"]) for p in points]
    return curves
