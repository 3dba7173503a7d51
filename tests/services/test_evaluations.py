"""Champion against challenger against PostgreSQL: a schedule's `evaluate:` makes
evaluation jobs, waits for them, compares on one holdout digest, and makes each job once
when two scheduler passes race (services/retraining/evaluation.py). The evaluation jobs'
outcomes are written here as a replica's would be; tests/e2e/test_evaluations.py runs
them for real."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from services.auth import tokens
from services.jobs.transitions import transition_job
from services.models import Evaluation, Job, MetricPoint, Project, Schedule, ScheduleRun
from services.retraining import evaluation, firing, promotion, schedules
from services.retraining.schemas import ScheduleCreate
from services.settings import get_settings
from services.statuses import JobStatus
from services.storage import keys
from services.storage.store import open_store
from tests.factories import create_token
from tests.services.test_schedules_concurrent import race

T0 = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)
JOB = {"trainer": "mlp_digits", "strategy": "one_device", "replicas": 1}
EVALUATE = {"data": "data/holdout", "metric": "accuracy", "mode": "max"}


def put_holdout(project_id: int, content: bytes) -> None:
    open_store().put_bytes(keys.data_key(project_id, "holdout/part-0.csv"), content)


def make(session: Session, project_id: int, name: str = "judged") -> Schedule:
    return schedules.create_schedule(
        session=session,
        project_id=project_id,
        schedule_in=ScheduleCreate.model_validate(
            {"name": name, "job": JOB, "interval_seconds": 10, "evaluate": EVALUATE}
        ),
        settings=get_settings(),
        now=T0,
    )


def finish(session: Session, job_id: int, status: JobStatus = JobStatus.SUCCEEDED) -> None:
    for target in (JobStatus.SCHEDULED, JobStatus.RUNNING, status):
        transition_job(session=session, job_id=job_id, target=target, reason="test")


def trained(session: Session, second: int) -> int:
    """A fired run's job, succeeded, with a model artifact in the store."""
    (job_id,) = firing.fire_due_schedules(
        session=session, settings=get_settings(), now=T0 + dt.timedelta(seconds=second)
    ).jobs
    finish(session, job_id)
    store = open_store()
    store.put_bytes(f"{keys.model_prefix(job_id)}/saved_model.pb", b"model %d" % job_id)
    store.put_bytes(f"{keys.model_prefix(job_id)}/variables/variables.index", b"v")
    return job_id


def evaluated(session: Session, job_id: int, value: float | None, ok: bool = True) -> None:
    """An evaluation job ends, reporting `value` as its chief's `accuracy`."""
    finish(session, job_id, JobStatus.SUCCEEDED if ok else JobStatus.FAILED)
    if value is not None:
        session.add(
            MetricPoint(
                job_id=job_id, attempt=1, replica=0, step=0, name="accuracy", value=value, ts=0.0
            )
        )
    session.flush()


def decide(session: Session, now: dt.datetime | None = None) -> None:
    promotion.decide_pending(session=session, settings=get_settings(), now=now)


def evaluations(session: Session, schedule: Schedule) -> list[Evaluation]:
    return list(
        session.execute(
            sa.select(Evaluation)
            .where(Evaluation.schedule_id == schedule.id)
            .order_by(Evaluation.id)
        ).scalars()
    )


def run_of(session: Session, job_id: int) -> ScheduleRun:
    return session.execute(sa.select(ScheduleRun).where(ScheduleRun.job_id == job_id)).scalar_one()


def test_new_models_are_judged_against_the_holder_on_one_holdout_digest(
    session: Session,
) -> None:
    _, token = create_token(session)
    put_holdout(token.project_id, b"1,2,3\n")
    schedule = make(session, token.project_id)
    a = trained(session, 10)
    decide(session)
    (ev_a,) = evaluations(session, schedule)
    assert run_of(session, a).decision == "pending"  # waits for its evaluation job
    job = session.get(Job, ev_a.job_id)
    assert job is not None and job.name == f"evaluate-job{a}-judged"
    assert (job.strategy, job.replicas, job.trainer, job.schedule_id) == (
        "one_device",
        1,
        "mlp_digits",
        None,
    )
    assert job.evaluation == {
        "model": {
            "saved_model.pb": f"jobs/{a}/model/saved_model.pb",
            "variables/variables.index": f"jobs/{a}/model/variables/variables.index",
        },
        "holdout": {"part-0.csv": f"data/{token.project_id}/holdout/part-0.csv"},
    }
    assert ev_a.holdout_digest.startswith("sha256:") and ev_a.status == "running"
    decide(session)  # a second pass makes no second job
    assert len(evaluations(session, schedule)) == 1
    evaluated(session, ev_a.job_id, 0.8)
    decide(session)
    assert run_of(session, a).decision == "promoted" and schedule.promoted_job_id == a
    assert schedule.promoted_value == 0.8

    # The holder was judged on this digest: only the new model is evaluated.
    b = trained(session, 20)
    decide(session)
    ev_b = evaluations(session, schedule)[-1]
    assert len(evaluations(session, schedule)) == 2 and ev_b.model_job_id == b
    evaluated(session, ev_b.job_id, 0.7)
    decide(session)
    assert run_of(session, b).decision == "kept" and schedule.promoted_job_id == a
    assert "0.7" in run_of(session, b).decision_reason

    # A new holdout: the holder is evaluated again, on the same files as the new model.
    put_holdout(token.project_id, b"4,5,6\n")
    c = trained(session, 30)
    decide(session)
    ev_c, ev_holder = evaluations(session, schedule)[-2:]
    assert (ev_c.model_job_id, ev_holder.model_job_id) == (c, a)
    assert ev_c.holdout_digest == ev_holder.holdout_digest != ev_a.holdout_digest
    evaluated(session, ev_c.job_id, 0.9)
    decide(session)
    assert run_of(session, c).decision == "pending"  # the holder's evaluation still runs
    evaluated(session, ev_holder.job_id, 0.6)
    decide(session)
    assert run_of(session, c).decision == "promoted" and schedule.promoted_job_id == c
    assert "beats job" in run_of(session, c).decision_reason
    shown = schedules.to_read(session=session, schedule=schedule)
    by_job = {r.job_id: r for r in shown.recent_runs}
    assert [(e.model_job_id, e.value) for e in by_job[c].evaluations] == [(c, 0.9), (a, 0.6)]
    assert shown.evaluate is not None and shown.evaluate.metric == "accuracy"


@pytest.mark.parametrize("outcome", ["failed", "no_metric"])
def test_a_failed_evaluation_keeps_the_holder(session: Session, outcome: str) -> None:
    _, token = create_token(session)
    put_holdout(token.project_id, b"1\n")
    schedule = make(session, token.project_id)
    a = trained(session, 10)
    decide(session)
    evaluated(session, evaluations(session, schedule)[0].job_id or 0, 0.5)
    decide(session)
    b = trained(session, 20)
    decide(session)
    ev_b = evaluations(session, schedule)[-1]
    if outcome == "failed":
        evaluated(session, ev_b.job_id or 0, None, ok=False)
        decide(session)
    else:
        evaluated(session, ev_b.job_id or 0, None)
        decide(session)
        assert run_of(session, b).decision == "pending"  # the metric may still arrive
        late = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=promotion.METRIC_GRACE_SECONDS + 1)
        decide(session, now=late)
    run = run_of(session, b)
    assert run.decision == "evaluation_failed", run.decision_reason
    words = "failed" if outcome == "failed" else "reported no 'accuracy'"
    assert f"evaluation of job {b}" in run.decision_reason and words in run.decision_reason
    assert schedule.promoted_job_id == a and ev_b.status == "failed"


def test_a_holder_whose_evaluation_failed_is_evaluated_again_by_the_next_run(
    session: Session,
) -> None:
    _, token = create_token(session)
    put_holdout(token.project_id, b"1\n")
    schedule = make(session, token.project_id)
    a = trained(session, 10)
    decide(session)
    evaluated(session, evaluations(session, schedule)[0].job_id or 0, 0.5)
    decide(session)
    put_holdout(token.project_id, b"2\n")  # a new digest: the holder is evaluated again
    b = trained(session, 20)
    decide(session)
    ev_b, holder_b = evaluations(session, schedule)[-2:]
    evaluated(session, ev_b.job_id or 0, 0.9)
    evaluated(session, holder_b.job_id or 0, None, ok=False)  # say, its node was lost
    decide(session)
    assert run_of(session, b).decision == "evaluation_failed"
    assert f"evaluation of job {a}" in run_of(session, b).decision_reason
    c = trained(session, 30)
    decide(session)
    ev_c, holder_c = evaluations(session, schedule)[-2:]
    assert (ev_c.model_job_id, holder_c.model_job_id) == (c, a)
    assert holder_c.id != holder_b.id and holder_c.holdout_digest == holder_b.holdout_digest
    evaluated(session, ev_c.job_id or 0, 0.4)
    evaluated(session, holder_c.job_id or 0, 0.6)
    decide(session)
    assert run_of(session, c).decision == "kept" and schedule.promoted_job_id == a


def test_a_model_without_artifact_fails_its_evaluation_without_a_job(session: Session) -> None:
    _, token = create_token(session)
    put_holdout(token.project_id, b"1\n")
    schedule = make(session, token.project_id)
    (job_id,) = firing.fire_due_schedules(
        session=session, settings=get_settings(), now=T0 + dt.timedelta(seconds=10)
    ).jobs
    finish(session, job_id)
    decide(session)
    (ev,) = evaluations(session, schedule)
    assert ev.job_id is None and "no model artifact" in ev.reason
    assert run_of(session, job_id).decision == "evaluation_failed"


@pytest.fixture
def pending_run(engine: Engine) -> Iterator[tuple[int, int]]:
    """(schedule id, job id): a committed schedule with evaluate whose run's job succeeded."""
    project = f"evalrace-{uuid.uuid4().hex[:8]}"
    with Session(engine) as session, session.begin():
        token = tokens.ensure_token(
            session=session,
            token="race_" + uuid.uuid4().hex,
            project_name=project,
            name="t",
            scopes=["schedules"],
        )
        put_holdout(token.project_id, b"1\n")
        schedule = make(session, token.project_id, "race")
        job_id = trained(session, 10)
        ids = schedule.id, job_id
    yield ids
    with Session(engine) as session, session.begin():
        session.execute(sa.delete(Project).where(Project.name == project))


def _evaluation_jobs(engine: Engine, schedule_id: int) -> list[Any]:
    with Session(engine) as session:
        return list(
            session.execute(
                sa.select(Evaluation.model_job_id, Evaluation.job_id, Job.name)
                .join(Job, Job.id == Evaluation.job_id)
                .where(Evaluation.schedule_id == schedule_id)
            ).all()
        )


def test_two_scheduler_passes_make_each_evaluation_job_once(
    engine: Engine, pending_run: tuple[int, int]
) -> None:
    schedule_id, job_id = pending_run
    errors = race(engine, lambda s: decide(s))
    assert errors == []
    made = _evaluation_jobs(engine, schedule_id)
    assert len(made) == 1 and made[0][0] == job_id
    with Session(engine) as session:
        names = session.execute(sa.select(Job.name).where(Job.name.like("evaluate-job%"))).all()
        assert [n for (n,) in names].count(f"evaluate-job{job_id}-race") == 1


def test_without_the_schedule_lock_the_unique_key_makes_one_job(
    engine: Engine, pending_run: tuple[int, int]
) -> None:
    """Two passes that judge the same run at once, neither holding the schedule's row
    lock (a leader that lost it mid-pass): the evaluations' unique key decides."""
    schedule_id, job_id = pending_run

    def judge(session: Session) -> None:
        run = session.execute(
            sa.select(ScheduleRun).where(ScheduleRun.job_id == job_id)
        ).scalar_one()
        job, schedule = session.get(Job, job_id), session.get(Schedule, schedule_id)
        assert job is not None and schedule is not None
        judged = evaluation.judge(
            session=session,
            settings=get_settings(),
            run=run,
            job=job,
            schedule=schedule,
            now=dt.datetime.now(dt.UTC),
        )
        assert judged is None  # its evaluation runs

    assert race(engine, judge) == []
    made = _evaluation_jobs(engine, schedule_id)
    assert len(made) == 1 and made[0][0] == job_id
    with Session(engine) as session:
        count = session.execute(
            sa.select(sa.func.count())
            .select_from(Job)
            .where(Job.evaluation.is_not(None))
            .where(Job.name == f"evaluate-job{job_id}-race")
        ).scalar_one()
        assert count == 1
