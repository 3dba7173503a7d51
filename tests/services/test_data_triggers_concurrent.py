"""Exactly once on PostgreSQL for data triggers: two sessions (two schedulers) at once
fire one content once, with the row lock and, without it, by the unique
(schedule_id, data_version) key. Their clocks differ, so the fire times differ too: only
the data version can make them the same fire. Transactions commit for real, in a project
of its own that the test deletes afterwards."""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import uuid
from collections.abc import Iterator

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from services.auth import tokens
from services.jobs.data_versions import newest_change, record_file
from services.models import Job, Project, Schedule, ScheduleRun, utcnow
from services.retraining import data_triggers, firing, schedules
from services.retraining.schemas import ScheduleCreate
from services.settings import get_settings
from services.storage import keys
from services.storage.store import open_store
from tests.services.test_schedules_concurrent import race

JOB = {"strategy": "one_device", "replicas": 1}


@pytest.fixture
def schedule_id(engine: Engine, artifact_env: str) -> Iterator[int]:
    del artifact_env
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
            schedule_in=ScheduleCreate.model_validate(
                {"name": "race", "job": JOB, "trigger": {"data": "data/d", "settle_seconds": 0}}
            ),
        )
        session.flush()
        ident = schedule.id
        store = open_store()
        store.put_bytes(keys.data_key(token.project_id, "d/x"), b"new")
        sha = "sha256:" + hashlib.sha256(b"new").hexdigest()
        record_file(
            session=session, store=store, project_id=token.project_id, path="d/x", sha256=sha
        )
    yield ident
    with Session(engine) as session, session.begin():
        session.execute(sa.delete(Project).where(Project.name == project))


def made(engine: Engine, schedule_id: int) -> tuple[int, list[str]]:
    with Session(engine) as session:
        jobs = session.execute(
            sa.select(sa.func.count()).select_from(Job).where(Job.schedule_id == schedule_id)
        ).scalar_one()
        outcomes = session.execute(
            sa.select(ScheduleRun.outcome).where(ScheduleRun.schedule_id == schedule_id)
        ).scalars()
        return jobs, list(outcomes)


def test_two_passes_at_once_fire_a_content_once(engine: Engine, schedule_id: int) -> None:
    clock = itertools.count(1)

    def pass_(session: Session) -> None:
        now = utcnow() + dt.timedelta(seconds=next(clock))  # two clocks, two fire times
        firing.fire_due_schedules(session=session, settings=get_settings(), now=now)

    assert race(engine, pass_) == []
    assert made(engine, schedule_id) == (1, ["fired"])


def test_the_unique_key_holds_even_without_the_row_lock(engine: Engine, schedule_id: int) -> None:
    clock = itertools.count(1)

    def unlocked(session: Session) -> None:
        schedule = session.get(Schedule, schedule_id)
        assert schedule is not None and schedule.trigger_path is not None
        newest = newest_change(
            session=session, project_id=schedule.project_id, path=schedule.trigger_path
        )
        assert newest is not None
        now = utcnow() + dt.timedelta(seconds=next(clock))
        data_triggers.fire_on_data(session, get_settings(), open_store(), schedule, newest, now)

    errors = race(engine, unlocked)
    # The loser's savepoint is undone (no job, no record); its transaction goes on.
    assert errors == []
    assert made(engine, schedule_id) == (1, ["fired"])
