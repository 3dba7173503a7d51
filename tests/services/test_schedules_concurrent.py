"""Exactly once on PostgreSQL: two sessions firing the same schedule at the same moment.

These transactions commit for real (a race needs two connections), in a project
of their own that the test deletes afterwards.
"""

from __future__ import annotations

import datetime as dt
import threading
import uuid
from collections.abc import Callable, Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from services.auth import tokens
from services.models import Job, Project, Schedule, ScheduleRun
from services.retraining import firing, schedules
from services.retraining.schemas import ScheduleCreate
from services.settings import get_settings

T0 = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)
JOB = {"strategy": "one_device", "replicas": 1}


@pytest.fixture
def schedule_id(engine: Engine) -> Iterator[int]:
    project = f"race-{uuid.uuid4().hex[:8]}"
    with Session(engine) as session, session.begin():
        token = tokens.ensure_token(
            session=session,
            token="race_" + uuid.uuid4().hex,
            project_name=project,
            name="t",
            scopes=["schedules"],
        )
        schedule = schedules.create_schedule(
            session=session,
            project_id=token.project_id,
            settings=get_settings(),
            now=T0,
            schedule_in=ScheduleCreate.model_validate(
                {"name": "race", "job": JOB, "interval_seconds": 10}
            ),
        )
        session.flush()
        ident = schedule.id
    yield ident
    with Session(engine) as session, session.begin():
        session.execute(sa.delete(Project).where(Project.name == project))


def race(engine: Engine, action: Callable[[Session], object]) -> list[BaseException]:
    """Run `action` in two sessions at once, each committing; return any errors."""
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            with Session(engine, expire_on_commit=False) as session, session.begin():
                barrier.wait(timeout=10)
                action(session)
        except BaseException as exc:  # reported to the test
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return errors


def fired(engine: Engine, schedule_id: int) -> list[tuple[dt.datetime, int]]:
    with Session(engine) as session:
        return [
            (t, n)
            for t, n in session.execute(
                sa.select(Job.scheduled_for, sa.func.count())
                .where(Job.schedule_id == schedule_id)
                .group_by(Job.scheduled_for)
                .order_by(Job.scheduled_for)
            ).all()
        ]


def test_two_passes_at_once_fire_each_due_time_once(engine: Engine, schedule_id: int) -> None:
    for second in (10, 20, 30, 40, 50):
        now = T0 + dt.timedelta(seconds=second, milliseconds=1)
        assert (
            race(
                engine,
                lambda s, now=now: firing.fire_due_schedules(
                    session=s, settings=get_settings(), now=now
                ),
            )
            == []
        )
    times = fired(engine, schedule_id)
    assert times == [(T0 + dt.timedelta(seconds=s), 1) for s in (10, 20, 30, 40, 50)]


def test_the_unique_key_holds_even_without_the_row_lock(engine: Engine, schedule_id: int) -> None:
    """Both sessions read the schedule WITHOUT locking it and fire the same due time:
    the (schedule_id, scheduled_for) key lets exactly one job through."""
    now = T0 + dt.timedelta(seconds=10, milliseconds=1)

    def unlocked_fire(session: Session) -> None:
        schedule = session.get(Schedule, schedule_id)
        assert schedule is not None
        firing.fire_schedule(session=session, settings=get_settings(), schedule=schedule, now=now)

    assert race(engine, unlocked_fire) == []
    assert fired(engine, schedule_id) == [(T0 + dt.timedelta(seconds=10), 1)]
    with Session(engine) as session:
        outcomes = (
            session.execute(
                sa.select(ScheduleRun.outcome).where(ScheduleRun.schedule_id == schedule_id)
            )
            .scalars()
            .all()
        )
    assert outcomes == ["fired"]
