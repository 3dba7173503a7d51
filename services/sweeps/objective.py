"""A trial's objective value, read from its stored metric points, and which trial is best.

The value counts the points of the trial's current attempt on the objective's
replica: `last` is the value at its highest step, `best` its highest (max) or
lowest (min) value.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.models import MetricPoint
from services.sweeps.schemas import Objective


class Attempt(Protocol):
    """A trial's job as far as its metrics go (a `Job`, or the columns of one)."""

    @property
    def id(self) -> int: ...

    @property
    def attempt(self) -> int: ...


def is_better(value: float, other: float | None, mode: str) -> bool:
    """Whether `value` strictly beats `other` (None: nothing to beat)."""
    if other is None:
        return True
    return value > other if mode == "max" else value < other


def objective_values(
    *, session: Session, jobs: Sequence[Attempt], objective: Objective
) -> dict[int, float]:
    """Job id -> objective value, for the jobs that reported the metric (one query)."""
    if not jobs:
        return {}
    where = (
        sa.tuple_(MetricPoint.job_id, MetricPoint.attempt).in_(
            [(job.id, job.attempt) for job in jobs]
        ),
        MetricPoint.replica == objective.replica,
        MetricPoint.name == objective.metric,
    )
    if objective.value == "best":
        pick = sa.func.max if objective.mode == "max" else sa.func.min
        rows = session.execute(
            sa.select(MetricPoint.job_id, pick(MetricPoint.value))
            .where(*where)
            .group_by(MetricPoint.job_id)
        ).all()
    else:
        ranked = (
            sa.select(
                MetricPoint.job_id,
                MetricPoint.value,
                sa.func.row_number()
                .over(
                    partition_by=MetricPoint.job_id,
                    order_by=(MetricPoint.step.desc(), MetricPoint.id.desc()),
                )
                .label("rank"),
            )
            .where(*where)
            .subquery()
        )
        rows = session.execute(
            sa.select(ranked.c.job_id, ranked.c.value).where(ranked.c.rank == 1)
        ).all()
    return {job_id: float(value) for job_id, value in rows if value is not None}


def best_of(
    values: dict[int, float], candidates: Iterable[int], mode: str
) -> tuple[int, float] | None:
    """The best (job id, value) among `candidates` that have a value; a tie goes to the
    earlier job."""
    best: tuple[int, float] | None = None
    for job_id in sorted(candidates):
        value = values.get(job_id)
        if value is not None and (best is None or is_better(value, best[1], mode)):
            best = (job_id, value)
    return best
