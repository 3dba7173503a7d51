"""A trial's objective value and points as read from metric_points: on PostgreSQL the jobs'
attempts are joined as two arrays (services/sweeps/objective.py `of_attempts`), on SQLite
matched by a tuple IN; both must read the same points, those of the listed attempt only."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from cli.stack import migrate
from services.db import make_engine
from services.models import MetricPoint
from services.sweeps.history import objective_points
from services.sweeps.objective import objective_values
from services.sweeps.schemas import Objective

NAN = float("nan")


@dataclass(frozen=True)
class Attempt:
    id: int
    attempt: int


# job id -> (attempt, replica, name, step, value); job ids far above any the tests create.
POINTS = {
    900001: [  # attempt 2 is current: attempt 1's better and later points do not count
        (1, 0, "loss", 1, 0.1),
        (1, 0, "loss", 9, 0.05),
        (2, 0, "loss", 1, 0.9),
        (2, 0, "loss", 2, 0.4),
        (2, 0, "loss", 3, 0.6),
    ],
    900002: [  # another replica's and another metric's points do not count
        (1, 0, "loss", 5, 2.0),
        (1, 0, "loss", 4, 3.0),
        (1, 1, "loss", 6, 0.01),
        (1, 0, "acc", 7, 0.99),
    ],
    900003: [(1, 0, "loss", 1, 1.5), (1, 0, "loss", 2, NAN)],  # a NaN, last
    900004: [(1, 0, "acc", 1, 0.5)],  # no point of the metric: no value
    900005: [(1, 0, "loss", 3, 7.0)],  # listed at an attempt it has no point of
}
JOBS = [Attempt(900001, 2), Attempt(900002, 1), Attempt(900003, 1), Attempt(900004, 1)]
JOBS += [Attempt(900005, 2), Attempt(900001, 2)]  # a job listed twice is read once


def _store(session: Session, nan_stored: bool) -> None:
    """POINTS; SQLite holds no NaN (a REAL NaN is stored as NULL, and value is NOT NULL)."""
    session.execute(
        sa.insert(MetricPoint),
        [
            {
                "job_id": job_id,
                "attempt": attempt,
                "replica": replica,
                "step": step,
                "epoch": None,
                "name": name,
                "value": value,
                "ts": 0.0,
            }
            for job_id, points in POINTS.items()
            for attempt, replica, name, step, value in points
            if nan_stored or not math.isnan(value)
        ],
    )
    session.flush()


def _values(
    session: Session, value: str, mode: str, jobs: list[Attempt] = JOBS
) -> dict[int, float]:
    objective = Objective(metric="loss", mode=mode, value=value)  # type: ignore[arg-type]
    return objective_values(session=session, jobs=jobs, objective=objective)


def _check(session: Session, nan_stored: bool) -> None:
    """The values and points of JOBS. A NaN point is stored on PostgreSQL (ranked above
    every number: max picks it, min never does), not on SQLite."""
    _store(session, nan_stored)
    last = _values(session, "last", "min")
    assert last.keys() == {900001, 900002, 900003}
    assert (last[900001], last[900002]) == (0.6, 2.0)
    assert math.isnan(last[900003]) if nan_stored else last[900003] == 1.5
    lowest = _values(session, "best", "min")
    assert lowest == {900001: 0.4, 900002: 2.0, 900003: 1.5}
    highest = _values(session, "best", "max")
    assert highest.keys() == {900001, 900002, 900003}
    assert (highest[900001], highest[900002]) == (0.9, 3.0)
    assert math.isnan(highest[900003]) if nan_stored else highest[900003] == 1.5
    points = objective_points(
        session=session, jobs=JOBS, objective=Objective(metric="loss", mode="min")
    )
    assert points == {
        900001: {1: 0.9, 2: 0.4, 3: 0.6},
        900002: {5: 2.0, 4: 3.0},
        900003: {1: 1.5},  # NaN: no point
        900004: {},
        900005: {},
    }
    assert _values(session, "best", "min", []) == {}


def test_the_objective_reads_the_listed_attempts_points_on_postgresql(session: Session) -> None:
    assert session.get_bind().dialect.name == "postgresql"
    _check(session, nan_stored=True)


def test_the_objective_reads_the_same_points_on_sqlite(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cohort.db'}"
    migrate(url)
    with Session(make_engine(url)) as session:
        _check(session, nan_stored=False)


@pytest.mark.parametrize("count", [1, 1100])
def test_many_attempts_are_read_in_one_query(session: Session, count: int) -> None:
    jobs = [Attempt(800000 + i, 1 + i % 3) for i in range(count)]
    session.execute(
        sa.insert(MetricPoint),
        [
            {
                "job_id": job.id,
                "attempt": attempt,
                "replica": 0,
                "step": 1,
                "epoch": None,
                "name": "loss",
                "value": float(job.id % 97 + attempt),
                "ts": 0.0,
            }
            for job in jobs
            for attempt in (1, 2, 3)
        ],
    )
    seen: list[str] = []

    def count_it(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        seen.append(statement)

    engine = session.get_bind()
    sa.event.listen(engine, "before_cursor_execute", count_it)
    try:
        values = _values(session, "last", "min", jobs)
    finally:
        sa.event.remove(engine, "before_cursor_execute", count_it)
    assert values == {job.id: float(job.id % 97 + job.attempt) for job in jobs}
    assert len(seen) == 1 and "unnest" in seen[0]
