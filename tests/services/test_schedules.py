"""Schedules against PostgreSQL: firing, missed runs, concurrency policies, pause, promotion."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.jobs.transitions import transition_job
from services.models import Job, MetricPoint, ScheduleRun, utcnow
from services.retraining import firing, promoted, promotion, schedules
from services.retraining.schemas import ScheduleCreate
from services.settings import get_settings
from services.statuses import JobStatus
from services.storage import keys
from services.storage.store import open_store
from tests.factories import create_token

T0 = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)
JOB = {
    "trainer": "mlp_digits",
    "strategy": "one_device",
    "replicas": 1,
    "hyperparameters": {"epochs": 1, "steps_per_epoch": 2},
}


def make(session: Session, **spec: Any):  # noqa: ANN201 - a Schedule
    _, token = create_token(session)
    body = {"name": "nightly", "job": JOB, "interval_seconds": 10, **spec}
    return schedules.create_schedule(
        session=session,
        project_id=token.project_id,
        schedule_in=ScheduleCreate.model_validate(body),
        settings=get_settings(),
        now=T0,
    )


def fire(session: Session, now: dt.datetime) -> firing.FireResult:
    return firing.fire_due_schedules(session=session, settings=get_settings(), now=now)


def runs(session: Session, schedule_id: int) -> list[ScheduleRun]:
    return list(
        session.execute(
            sa.select(ScheduleRun)
            .where(ScheduleRun.schedule_id == schedule_id)
            .order_by(ScheduleRun.scheduled_for)
        ).scalars()
    )


def finish(session: Session, job_id: int, status: JobStatus = JobStatus.SUCCEEDED) -> None:
    for target in (JobStatus.SCHEDULED, JobStatus.RUNNING, status):
        transition_job(session=session, job_id=job_id, target=target, reason="test")


def test_a_due_schedule_fires_one_job_linked_to_it(session: Session) -> None:
    schedule = make(session)
    assert schedule.next_fire_at == T0 + dt.timedelta(seconds=10)
    assert fire(session, T0 + dt.timedelta(seconds=9)).jobs == []

    result = fire(session, T0 + dt.timedelta(seconds=10, milliseconds=300))
    assert len(result.jobs) == 1
    job = session.get(Job, result.jobs[0])
    assert job.schedule_id == schedule.id
    assert job.scheduled_for == T0 + dt.timedelta(seconds=10)
    assert job.name == "nightly-20260601-120010"
    assert job.status is JobStatus.QUEUED and job.replicas == 1
    assert schedule.next_fire_at == T0 + dt.timedelta(seconds=20)
    assert schedule.last_outcome == "fired"
    # The same instant again: nothing more.
    assert fire(session, T0 + dt.timedelta(seconds=10, milliseconds=300)).jobs == []
    assert [r.outcome for r in runs(session, schedule.id)] == ["fired"]


def test_an_hour_of_downtime_fires_one_catch_up_run_not_a_burst(session: Session) -> None:
    schedule = make(session)
    result = fire(session, T0 + dt.timedelta(hours=1, seconds=3))
    assert len(result.jobs) == 1
    job = session.get(Job, result.jobs[0])
    assert job.scheduled_for == T0 + dt.timedelta(hours=1)  # the latest due time
    missed, fired = runs(session, schedule.id)
    assert missed.outcome == "missed" and "359 fire time(s)" in missed.reason
    assert fired.outcome == "fired"
    assert schedule.next_fire_at == T0 + dt.timedelta(hours=1, seconds=10)


def test_a_run_later_than_the_starting_deadline_is_skipped_and_recorded(session: Session) -> None:
    schedule = make(session, starting_deadline_seconds=5)
    assert fire(session, T0 + dt.timedelta(seconds=17)).jobs == []  # 7 s late
    (run,) = runs(session, schedule.id)
    assert run.outcome == "missed" and "starting_deadline_seconds=5" in run.reason
    assert run.job_id is None
    assert fire(session, T0 + dt.timedelta(seconds=24)).jobs  # 4 s late: fires


def test_forbid_skips_while_the_previous_job_is_active(session: Session) -> None:
    schedule = make(session, concurrency_policy="forbid")
    (first,) = fire(session, T0 + dt.timedelta(seconds=10)).jobs
    assert fire(session, T0 + dt.timedelta(seconds=20)).jobs == []
    assert runs(session, schedule.id)[-1].outcome == "skipped"
    assert f"job {first} " in runs(session, schedule.id)[-1].reason
    finish(session, first)
    assert len(fire(session, T0 + dt.timedelta(seconds=30)).jobs) == 1


def test_replace_cancels_the_previous_job_and_starts_anew(session: Session) -> None:
    schedule = make(session, concurrency_policy="replace")
    (first,) = fire(session, T0 + dt.timedelta(seconds=10)).jobs
    (second,) = fire(session, T0 + dt.timedelta(seconds=20)).jobs
    old = session.get(Job, first)
    assert old.status is JobStatus.CANCELLED
    assert f"replaced by job {second}" in old.reason
    assert f"replaced job {first}" in runs(session, schedule.id)[-1].reason


def test_allow_runs_side_by_side(session: Session) -> None:
    make(session)
    fire(session, T0 + dt.timedelta(seconds=10))
    fire(session, T0 + dt.timedelta(seconds=20))
    statuses = session.execute(sa.select(Job.status).where(Job.schedule_id.is_not(None))).all()
    assert [s for (s,) in statuses] == [JobStatus.QUEUED, JobStatus.QUEUED]


def test_paused_schedules_do_not_fire_and_resume_from_now(session: Session) -> None:
    schedule = make(session)
    schedules.pause_schedule(session=session, schedule=schedule)
    assert fire(session, T0 + dt.timedelta(minutes=5)).jobs == []
    schedules.resume_schedule(
        session=session, schedule=schedule, now=T0 + dt.timedelta(minutes=5, seconds=1)
    )
    assert schedule.next_fire_at == T0 + dt.timedelta(minutes=5, seconds=10)
    assert runs(session, schedule.id) == []  # nothing made up for the pause
    assert len(fire(session, T0 + dt.timedelta(minutes=5, seconds=10)).jobs) == 1


def _report(session: Session, job_id: int, value: float) -> None:
    session.add(
        MetricPoint(
            job_id=job_id,
            attempt=1,
            replica=0,
            step=5,
            epoch=1,
            name="eval_accuracy",
            value=value,
            ts=0.0,
        )
    )
    session.add(
        MetricPoint(
            job_id=job_id,
            attempt=1,
            replica=1,
            step=9,
            epoch=1,
            name="eval_accuracy",
            value=0.99,
            ts=0.0,
        )
    )  # not the chief
    session.flush()


def test_promotion_keeps_the_better_model(session: Session) -> None:
    schedule = make(session, promote={"metric": "eval_accuracy", "mode": "max"})
    values = {10: 0.90, 20: 0.85, 30: 0.93, 40: 0.93}
    for second, value in values.items():
        (job_id,) = fire(session, T0 + dt.timedelta(seconds=second)).jobs
        assert promotion.decide_pending(session=session) == []  # still running
        finish(session, job_id)
        _report(session, job_id, value)
        promotion.decide_pending(session=session)
    decisions = [(r.decision, r.metric_value) for r in runs(session, schedule.id)]
    assert decisions == [
        ("promoted", 0.90),
        ("kept", 0.85),
        ("promoted", 0.93),
        ("kept", 0.93),
    ]  # a tie keeps the promoted model
    third = runs(session, schedule.id)[2]
    assert schedule.promoted_job_id == third.job_id and schedule.promoted_value == 0.93
    model = promoted.read_promoted_model(session=session, schedule=schedule)
    assert model.job_id == third.job_id and model.path == f"jobs/{third.job_id}/model"
    assert model.artifact == f"jobs/{third.job_id}/model"
    assert model.download_url == f"/api/v1/jobs/{third.job_id}/artifacts/download?path=model"


def test_promotion_min_mode_and_failed_or_silent_runs(session: Session) -> None:
    schedule = make(session, promote={"metric": "eval_accuracy", "mode": "min"})
    (a,) = fire(session, T0 + dt.timedelta(seconds=10)).jobs
    finish(session, a, JobStatus.FAILED)
    (b,) = fire(session, T0 + dt.timedelta(seconds=20)).jobs
    finish(session, b)
    promotion.decide_pending(session=session)  # b has no metric yet: waits
    assert [r.decision for r in runs(session, schedule.id)] == ["not_eligible", "pending"]
    late = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=promotion.METRIC_GRACE_SECONDS + 1)
    promotion.decide_pending(session=session, now=late)
    assert [r.decision for r in runs(session, schedule.id)] == ["not_eligible", "no_metric"]
    assert schedule.promoted_job_id is None
    (c,) = fire(session, T0 + dt.timedelta(seconds=30)).jobs
    finish(session, c)
    _report(session, c, 0.5)
    promotion.decide_pending(session=session)
    assert schedule.promoted_job_id == c


def test_history_limits_delete_the_oldest_ended_jobs_but_keep_the_registered(
    session: Session,
) -> None:
    schedule = make(
        session, successful_jobs_history_limit=1, promote={"metric": "eval_accuracy", "mode": "max"}
    )
    ids = []
    # Promoted (a version, the alias), no metric (judged on nothing: no version), kept (a
    # version without the alias): the registry holds the first and the last.
    for second, value in ((10, 0.9), (20, None), (30, 0.4)):
        (job_id,) = fire(session, T0 + dt.timedelta(seconds=second)).jobs
        finish(session, job_id)
        if value is not None:
            _report(session, job_id, value)
        later = utcnow() + dt.timedelta(seconds=promotion.METRIC_GRACE_SECONDS + 1)
        promotion.decide_pending(session=session, now=later)
        ids.append(job_id)
    assert [r.decision for r in runs(session, schedule.id)] == ["promoted", "no_metric", "kept"]
    fire(session, T0 + dt.timedelta(seconds=40))  # pruning happens when a run fires
    left = {j for (j,) in session.execute(sa.select(Job.id).where(Job.id.in_(ids))).all()}
    assert left == {ids[0], ids[2]}  # the registered ones; the newest is one of them
    assert len(runs(session, schedule.id)) == 4  # every run is still recorded
    # The pruned job's metric points went with it (they carry no foreign key).
    kept = set(
        session.execute(sa.select(MetricPoint.job_id).where(MetricPoint.job_id.in_(ids))).scalars()
    )
    assert kept == {ids[0], ids[2]}


@pytest.mark.parametrize("bad", [{"cron": "* * *"}, {"cron": "*/5 * * * *", "interval_seconds": 5}])
def test_bad_timing_is_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="cron"):
        ScheduleCreate.model_validate({"name": "x", "job": JOB, **bad})


def test_a_template_that_no_longer_validates_is_recorded_as_failed(session: Session) -> None:
    schedule = make(session)
    schedule.job_template = {**schedule.job_template, "replicas": "two"}
    session.flush()
    assert fire(session, T0 + dt.timedelta(seconds=10)).jobs == []
    (run,) = runs(session, schedule.id)
    assert run.outcome == "failed" and "update the schedule's job" in run.reason
    assert schedule.next_fire_at == T0 + dt.timedelta(seconds=20)  # it does not retry in a loop


@pytest.mark.usefixtures("artifact_env")
@pytest.mark.parametrize("artifact_env", ["local"], indirect=True)
def test_a_run_whose_input_data_is_gone_is_recorded_as_failed(session: Session) -> None:
    _, token = create_token(session)
    store = open_store()
    store.put_bytes(keys.data_key(token.project_id, "digits/train.csv"), b"x,y\n")
    schedule = make(session, job={**JOB, "inputs": {"train.csv": "data/digits/train.csv"}})
    assert len(fire(session, T0 + dt.timedelta(seconds=10)).jobs) == 1
    store.delete(keys.data_key(token.project_id, "digits/train.csv"))
    assert fire(session, T0 + dt.timedelta(seconds=20)).jobs == []
    assert [r.outcome for r in runs(session, schedule.id)] == ["fired", "failed"]
    reason = runs(session, schedule.id)[-1].reason
    assert "'digits/train.csv' not found" in reason and "update the schedule's job" in reason


def test_a_run_whose_job_was_deleted_is_not_left_pending(session: Session) -> None:
    schedule = make(session, promote={"metric": "eval_accuracy", "mode": "max"})
    (job_id,) = fire(session, T0 + dt.timedelta(seconds=10)).jobs
    session.execute(sa.delete(Job).where(Job.id == job_id))
    session.expire_all()
    promotion.decide_pending(session=session)
    (run,) = runs(session, schedule.id)
    assert (run.decision, run.decision_reason) == ("not_eligible", "job deleted")
