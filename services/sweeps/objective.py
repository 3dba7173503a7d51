"""A trial's objective value, read from its stored metric points, and which trial is best.

The value counts the points of the trial's current attempt on the objective's
replica: `last` is the value at its highest step, `best` its highest (max) or
lowest (min) value.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVarTuple

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session

from services.models import MetricPoint
from services.sweeps.schemas import Objective

Columns = TypeVarTuple("Columns")
_INTEGERS = postgresql.ARRAY(sa.Integer)


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


def of_attempts(
    session: Session, query: sa.Select[*Columns], jobs: Sequence[Attempt]
) -> sa.Select[*Columns]:
    """`query`, over metric_points, cut to the points of the jobs' given attempts."""
    keys = list(dict.fromkeys((job.id, job.attempt) for job in jobs))  # a join repeats none
    if session.get_bind().dialect.name != "postgresql":  # SQLite: no unnest
        return query.where(sa.tuple_(MetricPoint.job_id, MetricPoint.attempt).in_(keys))
    # Not a tuple IN: for the 1,100 trials of a pass in which 100 sweeps of 11 each ask
    # one, its 2,200 parameters cost ~45 ms to bind and plan, and PostgreSQL scanned the
    # points of every job (the ids an OR filter): 355 ms on a table of 3.6 M points. Two
    # arrays joined as rows are two parameters and an index probe a pair: 6 ms; 9 ms.
    wanted = (
        sa.func.unnest(
            sa.bindparam("job_ids", [k[0] for k in keys], type_=_INTEGERS),
            sa.bindparam("attempts", [k[1] for k in keys], type_=_INTEGERS),
        )
        .table_valued("job_id", "attempt")
        .render_derived(name="wanted")
    )
    return query.join(
        wanted,
        sa.and_(MetricPoint.job_id == wanted.c.job_id, MetricPoint.attempt == wanted.c.attempt),
    )


def objective_values(
    *, session: Session, jobs: Sequence[Attempt], objective: Objective
) -> dict[int, float]:
    """Job id -> objective value, for the jobs that reported the metric (one query)."""
    if not jobs:
        return {}
    where = (MetricPoint.replica == objective.replica, MetricPoint.name == objective.metric)
    if objective.value == "best":
        pick = sa.func.max if objective.mode == "max" else sa.func.min
        rows = session.execute(
            of_attempts(session, sa.select(MetricPoint.job_id, pick(MetricPoint.value)), jobs)
            .where(*where)
            .group_by(MetricPoint.job_id)
        ).all()
    else:
        ranked = (
            of_attempts(
                session,
                sa.select(
                    MetricPoint.job_id,
                    MetricPoint.value,
                    sa.func.row_number()
                    .over(
                        partition_by=MetricPoint.job_id,
                        order_by=(MetricPoint.step.desc(), MetricPoint.id.desc()),
                    )
                    .label("rank"),
                ),
                jobs,
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
