"""A job's metric series thinned for charts: at most about a given number of points, as
means of equal step buckets, summed from the rollups (services.models.MetricRollup)
where whole rollup buckets fit, so a long run draws quickly."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.models import MetricPoint, MetricRollup
from services.telemetry.metrics import ROLLUP_STEPS


def read_metrics_downsampled(
    *,
    session: Session,
    job_id: int,
    max_points: int,
    names: list[str] | None = None,
    replica: int | None = None,
    attempt: int | None = None,
    since_step: int | None = None,
) -> list[dict[str, Any]]:
    """At most about `max_points` points: each series `(attempt, replica, name)` keeps its
    share, as the mean of equal step buckets (the last step of a bucket stands for it), so a
    long run draws quickly. Series with few points come back whole.

    A whole series (no `since_step`) is summed from the rollups when its buckets span at
    least ROLLUP_STEPS steps: the buckets are then whole rollup buckets (their width a
    multiple of ROLLUP_STEPS, counted from a multiple of it), and the means are exact.
    """
    point_filters = _series_filters(MetricPoint, job_id, names, replica, attempt)
    if since_step is not None:
        point_filters.append(MetricPoint.step > since_step)
    series = _series_sizes(
        session, job_id, names, replica, attempt, point_filters, whole=since_step is None
    )
    budget = max(1, max_points // max(1, len(series)))
    out: list[dict[str, Any]] = []
    for s_attempt, s_replica, s_name, count, low, high in series:
        head = {"attempt": s_attempt, "replica": s_replica, "name": s_name}
        rows = _series_buckets(
            session,
            job_id,
            point_filters,
            (s_attempt, s_replica, s_name),
            count,
            low,
            high,
            budget,
            whole=since_step is None,
        )
        out.extend(
            {**head, "step": int(step), "epoch": epoch, "value": float(value), "ts": float(ts)}
            for step, epoch, value, ts in rows
        )
    out.sort(key=lambda p: (p["attempt"], p["step"], p["replica"], p["name"]))
    return out


def _series_sizes(
    session: Session,
    job_id: int,
    names: list[str] | None,
    replica: int | None,
    attempt: int | None,
    point_filters: list[Any],
    *,
    whole: bool,
) -> Sequence[Any]:
    """(attempt, replica, name, points, first step, last step) of each series."""
    if not whole:
        return session.execute(
            sa.select(
                MetricPoint.attempt,
                MetricPoint.replica,
                MetricPoint.name,
                sa.func.count(),
                sa.func.min(MetricPoint.step),
                sa.func.max(MetricPoint.step),
            )
            .where(*point_filters)
            .group_by(MetricPoint.attempt, MetricPoint.replica, MetricPoint.name)
        ).all()
    # The series' sizes from the rollups: about 1/ROLLUP_STEPS of the rows.
    return session.execute(
        sa.select(
            MetricRollup.attempt,
            MetricRollup.replica,
            MetricRollup.name,
            sa.func.sum(MetricRollup.points),
            sa.func.min(MetricRollup.first_step),
            sa.func.max(MetricRollup.last_step),
        )
        .where(*_series_filters(MetricRollup, job_id, names, replica, attempt))
        .group_by(MetricRollup.attempt, MetricRollup.replica, MetricRollup.name)
    ).all()


def _series_buckets(
    session: Session,
    job_id: int,
    point_filters: list[Any],
    series: tuple[int, int, str],
    count: int,
    low: int,
    high: int,
    budget: int,
    *,
    whole: bool,
) -> Sequence[Any]:
    """(step, epoch, value, ts) of one series in at most `budget` buckets: its points when
    it has no more, else the rollups' exact means when whole rollup buckets fit, else the
    points averaged by step bucket."""
    s_attempt, s_replica, s_name = series
    # Bounded by the sizes just read: points stored meanwhile must not add a bucket.
    where = [
        *point_filters,
        MetricPoint.attempt == s_attempt,
        MetricPoint.replica == s_replica,
        MetricPoint.name == s_name,
        MetricPoint.step <= high,
    ]
    origin = low // ROLLUP_STEPS * ROLLUP_STEPS  # where whole rollup buckets start
    aligned = math.ceil((high - origin + 1) / budget)
    if count <= budget:
        return session.execute(
            sa.select(MetricPoint.step, MetricPoint.epoch, MetricPoint.value, MetricPoint.ts)
            .where(*where)
            .order_by(MetricPoint.step)
        ).all()
    if whole and aligned >= ROLLUP_STEPS:
        width = math.ceil(aligned / ROLLUP_STEPS) * ROLLUP_STEPS  # still <= budget buckets
        return _rollup_means(session, job_id, series, origin, width, high)
    return _point_means(session, where, low, math.ceil((high - low + 1) / budget))


def _rollup_means(
    session: Session, job_id: int, series: tuple[int, int, str], origin: int, width: int, high: int
) -> Sequence[Any]:
    """(step, epoch, value, ts) of one whole series: the exact means of buckets `width`
    steps wide (a multiple of ROLLUP_STEPS) from `origin`, summed from its rollups."""
    s_attempt, s_replica, s_name = series
    bucket = (MetricRollup.bucket * ROLLUP_STEPS - origin) // width
    return session.execute(
        sa.select(
            sa.func.max(MetricRollup.last_step),
            sa.func.max(MetricRollup.last_epoch),
            sa.func.sum(MetricRollup.total) / sa.func.sum(MetricRollup.points),
            sa.func.max(MetricRollup.last_ts),
        )
        .where(
            *_series_filters(MetricRollup, job_id, [s_name], s_replica, s_attempt),
            MetricRollup.bucket <= high // ROLLUP_STEPS,
        )
        .group_by(bucket)
        .order_by(bucket)
    ).all()


def _point_means(session: Session, where: list[Any], low: int, width: int) -> Sequence[Any]:
    """(step, epoch, value, ts) of the points `where` picks, averaged by buckets `width`
    steps wide from `low`."""
    bucket = (MetricPoint.step - low) // width  # floor division on both databases
    return session.execute(
        sa.select(
            sa.func.max(MetricPoint.step),
            sa.func.max(MetricPoint.epoch),
            sa.func.avg(MetricPoint.value),
            sa.func.max(MetricPoint.ts),
        )
        .where(*where)
        .group_by(bucket)
        .order_by(bucket)
    ).all()


def _series_filters(
    table: type[MetricPoint] | type[MetricRollup],
    job_id: int,
    names: list[str] | None,
    replica: int | None,
    attempt: int | None,
) -> list[Any]:
    """WHERE clauses picking series, on the points or on their rollups."""
    filters = [table.job_id == job_id]
    if names:
        filters.append(table.name.in_(names))
    if replica is not None:
        filters.append(table.replica == replica)
    if attempt is not None:
        filters.append(table.attempt == attempt)
    return filters
