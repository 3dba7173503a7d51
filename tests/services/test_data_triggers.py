"""Data-triggered schedules against PostgreSQL and a directory store: once per new content,
debounced, baselined, paused, deleted; the variables each fire gives its job. The pass
runs at a `now` the test gives (the clock is the test's; the data's changes are real)."""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.jobs.data_versions import content_digest, record_deleted, record_file
from services.jobs.transitions import transition_job
from services.models import Job, Schedule, ScheduleRun, utcnow
from services.retraining import firing, schedules
from services.retraining.data_triggers import decide
from services.retraining.schemas import ScheduleCreate, ScheduleUpdate
from services.settings import get_settings
from services.statuses import JobStatus
from services.storage import keys
from services.storage.store import open_store
from tests.factories import create_token

JOB = {
    "trainer": "mlp_digits",
    "strategy": "one_device",
    "replicas": 1,
    "hyperparameters": {"epochs": 1, "steps_per_epoch": 2},
}
SETTLE = 30


def later(seconds: float) -> dt.datetime:
    return utcnow() + dt.timedelta(seconds=seconds)


def push(session: Session, project_id: int, path: str, body: bytes) -> None:
    """What the api's upload does: the file in the store, then its row."""
    store = open_store()
    store.put_bytes(keys.data_key(project_id, path), body)
    sha = "sha256:" + hashlib.sha256(body).hexdigest()
    record_file(session=session, store=store, project_id=project_id, path=path, sha256=sha)
    session.flush()


def remove(session: Session, project_id: int, path: str) -> None:
    open_store().delete(keys.data_key(project_id, path))
    record_deleted(session=session, project_id=project_id, path=path)
    session.flush()


def make(session: Session, project_id: int, **spec: Any) -> Schedule:
    body = {
        "name": "on-data",
        "job": JOB,
        "trigger": {"data": "data/digits", "settle_seconds": SETTLE},
        **spec,
    }
    return schedules.create_schedule(
        session=session,
        project_id=project_id,
        schedule_in=ScheduleCreate.model_validate(body),
        settings=get_settings(),
    )


def fire(session: Session, now: dt.datetime) -> list[ScheduleRun]:
    return firing.fire_due_schedules(session=session, settings=get_settings(), now=now).runs


def runs(session: Session, schedule: Schedule) -> list[ScheduleRun]:
    return list(
        session.execute(
            sa.select(ScheduleRun)
            .where(ScheduleRun.schedule_id == schedule.id)
            .order_by(ScheduleRun.id)
        ).scalars()
    )


@pytest.fixture
def project(session: Session, artifact_env: str) -> int:
    del artifact_env  # a fresh store
    return create_token(session)[1].project_id


T = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("newest", "seen", "now", "step"),
    [
        (None, None, T, "idle"),  # no data
        (T, T, T + dt.timedelta(hours=1), "idle"),  # nothing newer than what was looked at
        (T, T - dt.timedelta(seconds=1), T + dt.timedelta(seconds=29), "wait"),  # settling
        (T, None, T + dt.timedelta(seconds=30), "check"),  # settled: exactly settle_seconds
        (T, T - dt.timedelta(days=1), T + dt.timedelta(days=1), "check"),
    ],
)
def test_the_debounce_decision(
    newest: dt.datetime | None, seen: dt.datetime | None, now: dt.datetime, step: str
) -> None:
    assert decide(newest=newest, seen=seen, settle_seconds=30, now=now) == step


def test_each_new_content_fires_once_after_it_settles(session: Session, project: int) -> None:
    push(session, project, "digits/train.csv", b"v0")
    schedule = make(session, project)
    # The content there when it was created counts as handled.
    assert schedule.data_version is not None and schedule.next_fire_at is None
    assert fire(session, later(SETTLE + 5)) == []

    # Several files within settle_seconds: nothing until the newest is settled, then one run.
    push(session, project, "digits/train.csv", b"v1")
    push(session, project, "digits/extra.csv", b"x")
    assert fire(session, later(SETTLE - 10)) == []
    [run] = fire(session, later(SETTLE + 1))
    version = content_digest(session=session, store=open_store(), project_id=project, path="digits")
    assert version is not None and run.data_version == version.digest
    assert run.outcome == "fired" and version.digest in run.reason
    job = session.get(Job, run.job_id)
    assert job is not None and job.schedule_id == schedule.id
    assert job.schedule_env["COHORT_DATA_VERSION"] == version.digest
    assert job.schedule_env["COHORT_SCHEDULED_FOR"].endswith("Z")
    assert job.schedule_env["COHORT_DATA_INTERVAL_END"] == version.updated_at.isoformat().replace(
        "+00:00", "Z"
    )
    assert fire(session, later(SETTLE + 2)) == []  # the same version: not again

    # The same bytes pushed again: a change, no new content, no run.
    push(session, project, "digits/train.csv", b"v1")
    assert fire(session, later(SETTLE + 1)) == []
    # A second new content: a second run, whose interval starts where the first's ended.
    push(session, project, "digits/train.csv", b"v2")
    [second] = fire(session, later(SETTLE + 1))
    assert second.data_version not in {run.data_version, None}
    env = session.get(Job, second.job_id).schedule_env
    assert env["COHORT_DATA_INTERVAL_START"] == job.schedule_env["COHORT_DATA_INTERVAL_END"]
    assert len(runs(session, schedule)) == 2


def test_other_data_and_other_projects_do_not_fire_it(session: Session, project: int) -> None:
    schedule = make(session, project)
    other = create_token(session, "other-project")[1].project_id
    push(session, other, "digits/train.csv", b"theirs")  # the same path, another project
    push(session, project, "digits_x/train.csv", b"a sibling prefix")  # '_' is no wildcard
    push(session, project, "digitsmore.csv", b"a longer name")
    assert fire(session, later(SETTLE + 1)) == []
    assert runs(session, schedule) == []


def test_no_data_then_the_first_push_fires_and_a_delete_fires_nothing(
    session: Session, project: int
) -> None:
    schedule = make(session, project)
    assert schedule.data_version is None
    push(session, project, "digits/train.csv", b"first")
    [run] = fire(session, later(SETTLE + 1))
    assert "COHORT_DATA_INTERVAL_START" not in session.get(Job, run.job_id).schedule_env
    remove(session, project, "digits/train.csv")
    assert fire(session, later(SETTLE + 1)) == []
    assert len(runs(session, schedule)) == 1


def test_fire_on_existing_fires_for_the_content_there(session: Session, project: int) -> None:
    push(session, project, "digits/train.csv", b"there")
    trigger = {"data": "data/digits", "settle_seconds": 0, "fire_on_existing": True}
    schedule = make(session, project, trigger=trigger)
    [run] = fire(session, later(1))
    assert run.data_version is not None and schedule.data_version == run.data_version


def test_paused_fires_nothing_and_resumed_fires_the_newest_content_once(
    session: Session, project: int
) -> None:
    schedule = make(session, project)
    schedules.pause_schedule(session=session, schedule=schedule)
    push(session, project, "digits/train.csv", b"a")
    assert fire(session, later(SETTLE + 1)) == []
    push(session, project, "digits/train.csv", b"b")
    assert fire(session, later(SETTLE + 1)) == []
    schedules.resume_schedule(session=session, schedule=schedule)
    [run] = fire(session, later(SETTLE + 1))
    newest = content_digest(session=session, store=open_store(), project_id=project, path="digits")
    assert newest is not None and run.data_version == newest.digest


def test_forbid_records_the_skipped_version(session: Session, project: int) -> None:
    schedule = make(session, project, concurrency_policy="forbid")
    push(session, project, "digits/train.csv", b"a")
    [first] = fire(session, later(SETTLE + 1))
    push(session, project, "digits/train.csv", b"b")
    [skipped] = fire(session, later(SETTLE + 1))
    assert skipped.outcome == "skipped" and skipped.job_id is None
    assert skipped.data_version is not None and skipped.data_version in skipped.reason
    for target in (JobStatus.SCHEDULED, JobStatus.RUNNING, JobStatus.SUCCEEDED):
        transition_job(session=session, job_id=first.job_id, target=target, reason="test")
    assert fire(session, later(SETTLE + 1)) == []  # skipped is handled: not fired later
    assert schedule.last_outcome == "skipped"


def test_updating_the_settle_time_keeps_a_pending_change(session: Session, project: int) -> None:
    schedule = make(session, project)
    push(session, project, "digits/train.csv", b"pending")
    update = ScheduleUpdate.model_validate(
        {"trigger": {"data": "data/digits", "settle_seconds": 5}}
    )
    schedules.update_schedule(
        session=session, schedule=schedule, schedule_in=update, settings=get_settings()
    )
    assert len(fire(session, later(6))) == 1


def test_a_timed_run_covers_the_interval_since_the_last_run(session: Session, project: int) -> None:
    start = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)
    schedule = schedules.create_schedule(
        session=session,
        project_id=project,
        schedule_in=ScheduleCreate.model_validate(
            {"name": "every10", "job": JOB, "interval_seconds": 10}
        ),
        settings=get_settings(),
        now=start,
    )
    fire(session, start + dt.timedelta(seconds=10))
    fire(session, start + dt.timedelta(seconds=20))
    first, second = (session.get(Job, r.job_id) for r in runs(session, schedule))
    assert first is not None and second is not None
    assert first.schedule_env == {
        "COHORT_SCHEDULED_FOR": "2026-06-01T12:00:10Z",
        "COHORT_DATA_INTERVAL_START": "2026-06-01T12:00:00Z",  # the first: from creation
        "COHORT_DATA_INTERVAL_END": "2026-06-01T12:00:10Z",
    }
    assert second.schedule_env["COHORT_DATA_INTERVAL_START"] == "2026-06-01T12:00:10Z"
    assert second.schedule_env["COHORT_DATA_INTERVAL_END"] == "2026-06-01T12:00:20Z"


def test_a_sweeps_trials_carry_its_fire(session: Session, project: int) -> None:
    from services.models import Sweep
    from services.scheduling.scheduler_pass import run_pass

    sweep = {
        "template": JOB,
        "space": {"grid": {"learning_rate": [0.1, 0.01]}},
        "max_concurrent": 2,
        "objective": {"metric": "eval_accuracy", "mode": "max"},
    }
    schedule = make(session, project, job=None, sweep=sweep)
    push(session, project, "digits/train.csv", b"new")
    [run] = fire(session, later(SETTLE + 1))
    made = session.get(Sweep, run.sweep_id)
    assert made is not None and made.schedule_env["COHORT_DATA_VERSION"] == run.data_version
    run_pass(session=session, settings=get_settings(), heartbeats=[], now=later(SETTLE + 2))
    trials = session.execute(sa.select(Job).where(Job.sweep_id == made.id)).scalars().all()
    assert len(trials) == 2
    assert all(trial.schedule_env == made.schedule_env for trial in trials)
    assert schedule.data_version == run.data_version


def test_a_skipped_fire_times_interval_goes_to_the_next_run(session: Session, project: int) -> None:
    start = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)
    body = {"name": "forbid", "job": JOB, "interval_seconds": 10, "concurrency_policy": "forbid"}
    schedule = schedules.create_schedule(
        session=session,
        project_id=project,
        schedule_in=ScheduleCreate.model_validate(body),
        settings=get_settings(),
        now=start,
    )
    fire(session, start + dt.timedelta(seconds=10))
    fire(session, start + dt.timedelta(seconds=20))  # the first still runs: skipped
    first, skipped = runs(session, schedule)
    assert skipped.outcome == "skipped"
    for target in (JobStatus.SCHEDULED, JobStatus.RUNNING, JobStatus.SUCCEEDED):
        transition_job(session=session, job_id=first.job_id, target=target, reason="test")
    fire(session, start + dt.timedelta(seconds=30))
    third = session.get(Job, runs(session, schedule)[2].job_id)
    assert third is not None and third.schedule_env is not None
    assert third.schedule_env["COHORT_DATA_INTERVAL_START"] == "2026-06-01T12:00:10Z"
    assert third.schedule_env["COHORT_DATA_INTERVAL_END"] == "2026-06-01T12:00:30Z"
