"""Quotas against PostgreSQL: refusals at submission, jobs waiting in the scheduling pass,
sweeps' trials and schedules' fire times over quota, and fair turns between projects."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.cluster.nodes import Heartbeat
from services.exceptions import BeyondQuota, QuotaExceeded
from services.jobs import quotas
from services.jobs.quota_schemas import QuotaUpdate
from services.jobs.schemas import JobCreate
from services.jobs.store import create_job as create_job_service
from services.models import Job, ScheduleRun, Sweep, SweepTrial, utcnow
from services.retraining import firing, schedules
from services.retraining.schemas import ScheduleCreate
from services.scheduling import scheduler_pass
from services.settings import get_settings
from services.statuses import JobStatus, SweepStatus
from services.sweeps import advance
from services.sweeps import store as sweeps
from services.sweeps.schemas import SweepCreate
from tests.factories import create_job, create_token

JOB: dict[str, Any] = {"strategy": "one_device", "replicas": 1}


def project(session: Session, **limits: int | None) -> int:
    """A project of its own with these limits set by an admin; its id."""
    name = f"quota-{uuid.uuid4().hex[:8]}"
    _, token = create_token(session, name)
    quotas.set_quota(
        session=session, project_name=name, quota_in=QuotaUpdate(**limits), settings=get_settings()
    )
    return token.project_id


def queued(session: Session, project_id: int) -> int:
    return session.execute(
        sa.select(sa.func.count())
        .select_from(Job)
        .where(Job.project_id == project_id, Job.status == JobStatus.QUEUED)
    ).scalar_one()


def beat(node_id: str, slots: int) -> Heartbeat:
    return Heartbeat(node_id=node_id, address="10.3.0.1", slots=slots, gpus=0, at=utcnow())


def run_pass(session: Session, *beats: Heartbeat) -> scheduler_pass.PassResult:
    return scheduler_pass.run_pass(session=session, settings=get_settings(), heartbeats=list(beats))


def test_the_job_past_the_queued_quota_is_refused_and_nothing_is_stored(session: Session) -> None:
    pid = project(session, max_queued_jobs=2)
    create_job(session, pid, **JOB)
    create_job(session, pid, **JOB)
    with pytest.raises(QuotaExceeded) as refused:
        create_job(session, pid, **JOB)
    assert (refused.value.quota, refused.value.used, refused.value.allowed) == (
        "max_queued_jobs",
        2,
        2,
    )
    assert refused.value.message.startswith("project quota: 2 of 2 queued jobs")
    assert queued(session, pid) == 2


def test_a_job_that_started_frees_its_place_in_the_queued_quota(session: Session) -> None:
    pid = project(session, max_queued_jobs=1)
    first = create_job(session, pid, **JOB)
    run_pass(session, beat(f"q{pid}", 2))
    assert first.status is JobStatus.SCHEDULED
    assert create_job(session, pid, **JOB).status is JobStatus.QUEUED


def test_a_retried_submission_is_answered_with_its_job_when_the_quota_is_full(
    session: Session,
) -> None:
    pid = project(session, max_queued_jobs=1)
    spec = JobCreate.model_validate(JOB)
    first, created = create_job_service(
        session=session, project_id=pid, job_in=spec, settings=get_settings(), idempotency_key="k1"
    )
    again, created_again = create_job_service(
        session=session, project_id=pid, job_in=spec, settings=get_settings(), idempotency_key="k1"
    )
    assert created and not created_again and again.id == first.id


@pytest.mark.parametrize(
    ("limits", "spec", "field", "quota", "used", "allowed"),
    [
        ({"max_priority": 3}, {"priority": 4}, "priority", "max_priority", 4, 3),
        (
            {"max_running_replicas": 2},
            {"strategy": "multi_worker_mirrored", "replicas": 3},
            "replicas",
            "max_running_replicas",
            3,
            2,
        ),
        (
            {"max_gpus": 3},
            {"strategy": "multi_worker_mirrored", "replicas": 2, "gpus_per_replica": 2},
            "gpus_per_replica",
            "max_gpus",
            4,
            3,
        ),
    ],
)
def test_a_job_the_quota_never_permits_is_refused_naming_the_field(
    session: Session,
    limits: dict[str, int],
    spec: dict[str, Any],
    field: str,
    quota: str,
    used: int,
    allowed: int,
) -> None:
    pid = project(session, **limits)
    with pytest.raises(BeyondQuota) as refused:
        create_job(session, pid, **{**JOB, **spec})
    assert (
        refused.value.field,
        refused.value.quota,
        refused.value.used,
        refused.value.allowed,
    ) == (field, quota, used, allowed)
    assert queued(session, pid) == 0


def test_the_default_priority_ceiling_comes_from_the_settings(session: Session) -> None:
    pid = project(session)
    ceiling = get_settings().QUOTA_MAX_PRIORITY
    assert ceiling is not None
    assert create_job(session, pid, **JOB, priority=ceiling).priority == ceiling
    with pytest.raises(BeyondQuota):
        create_job(session, pid, **JOB, priority=ceiling + 1)


def test_schedules_past_the_quota_are_refused(session: Session) -> None:
    pid = project(session, max_schedules=1, max_priority=0)

    def make(name: str, **job: Any) -> Any:
        return schedules.create_schedule(
            session=session,
            project_id=pid,
            settings=get_settings(),
            schedule_in=ScheduleCreate.model_validate(
                {"name": name, "job": {**JOB, **job}, "interval_seconds": 60}
            ),
        )

    with pytest.raises(BeyondQuota) as above:
        make("urgent", priority=5)
    assert above.value.field == "job.priority"
    make("one")
    with pytest.raises(QuotaExceeded) as refused:
        make("two")
    assert (refused.value.used, refused.value.allowed) == (1, 1)


def test_running_quota_keeps_jobs_queued_with_the_reason(session: Session) -> None:
    pid = project(session, max_running_replicas=4)
    gangs = [
        create_job(session, pid, strategy="multi_worker_mirrored", replicas=2) for _ in range(3)
    ]
    run_pass(session, beat(f"r{pid}", 8))
    assert [g.status for g in gangs] == [JobStatus.SCHEDULED] * 2 + [JobStatus.QUEUED]
    assert gangs[2].reason == "project quota: 4 of 4 running replicas in use"
    read = quotas.read_quota(
        session=session, project_name=gangs[0].project.name, settings=get_settings()
    )
    assert (read.used.running_replicas, read.used.queued_jobs) == (4, 1)
    assert read.limits.max_running_replicas == 4 and read.overrides.max_gpus is None


def test_two_projects_take_turns_on_a_shared_node(session: Session) -> None:
    first, second = project(session), project(session)
    early = [
        create_job(session, first, strategy="multi_worker_mirrored", replicas=2) for _ in range(5)
    ]
    late = [
        create_job(session, second, strategy="multi_worker_mirrored", replicas=2) for _ in range(5)
    ]
    run_pass(session, beat(f"f{first}", 4))
    # Submission order alone would give both places to the first project's jobs.
    assert early[0].status is JobStatus.SCHEDULED and late[0].status is JobStatus.SCHEDULED
    assert all(j.status is JobStatus.QUEUED for j in early[1:] + late[1:])


def test_sweep_trials_wait_for_room_in_the_queued_quota(session: Session) -> None:
    pid = project(session, max_queued_jobs=2)
    sweep = sweeps.create_sweep(
        session=session,
        project_id=pid,
        settings=get_settings(),
        sweep_in=SweepCreate.model_validate(
            {
                "name": "lr",
                "template": {**JOB, "trainer": "mlp_digits"},
                "max_concurrent": 4,
                "space": {"grid": {"learning_rate": [0.1, 0.01, 0.001]}},
                "objective": {"metric": "accuracy", "mode": "max"},
            }
        ),
    )
    result = advance.advance_sweeps(session=session, settings=get_settings())
    assert len(result.created) == 2 and sweep.trials_created == 2
    assert sweep.reason.endswith("waiting: project quota: 2 of 2 queued jobs")
    run_pass(session, beat(f"s{pid}", 4))  # the two trials start; the third may be created
    assert advance.advance_sweeps(session=session, settings=get_settings()).created
    assert sweep.trials_created == 3 and "waiting" not in sweep.reason


def gang_sweep(session: Session, project_id: int) -> Sweep:
    """A sweep whose four trials' parameters are fixed ahead: 1, 3, 1 and 3 replicas."""
    sweep = sweeps.create_sweep(
        session=session,
        project_id=project_id,
        settings=get_settings(),
        sweep_in=SweepCreate.model_validate(
            {
                "name": "gangs",
                "template": {**JOB, "strategy": "multi_worker_mirrored", "trainer": "mlp_digits"},
                "max_concurrent": 4,
                "space": {"grid": {"replicas": [1, 3], "learning_rate": [0.1, 0.01]}},
                "objective": {"metric": "accuracy", "mode": "max"},
            }
        ),
    )
    for index, (replicas, rate) in enumerate([(1, 0.1), (3, 0.1), (1, 0.01), (3, 0.01)]):
        session.add(
            SweepTrial(
                sweep_id=sweep.id,
                trial_index=index,
                parameters={"replicas": replicas, "learning_rate": rate},
            )
        )
    return sweep


def test_a_trial_over_a_quota_lowered_since_ends_its_sweep_and_none_behind_it_is_created(
    session: Session,
) -> None:
    # The pass admits a sweep's trials in one batch: trial 2 (one replica) fits the quota
    # that refuses trial 1 (three), yet one at a time trial 2 was never reached.
    name = f"quota-{uuid.uuid4().hex[:8]}"
    _, token = create_token(session, name)
    sweep = gang_sweep(session, token.project_id)
    quotas.set_quota(
        session=session,
        project_name=name,
        quota_in=QuotaUpdate(max_running_replicas=2),
        settings=get_settings(),
    )
    session.flush()
    result = advance.advance_sweeps(session=session, settings=get_settings())
    created = [session.get(Job, job_id) for job_id in result.created]
    assert [(j.trial_index, j.replicas) for j in created if j is not None] == [(0, 1)]
    assert sweep.trials_created == 1 and sweep.status is SweepStatus.FAILED
    assert sweep.reason.startswith("trial 1 was refused: ")
    assert (
        session.execute(sa.select(sa.func.count()).where(Job.sweep_id == sweep.id)).scalar_one()
        == 1
    )


def test_a_sweep_cut_at_its_refusal_leaves_the_next_sweep_the_place_it_had_one_at_a_time(
    session: Session,
) -> None:
    # The pass admits every sweep's trials in one batch. There, the first sweep's trial 2
    # fits past its refusal and takes the queued quota's last place; one sweep at a time,
    # the first stops at its trial 1 and the second sweep's trial has that place.
    name = f"quota-{uuid.uuid4().hex[:8]}"
    _, token = create_token(session, name)
    first = gang_sweep(session, token.project_id)
    second = sweeps.create_sweep(
        session=session,
        project_id=token.project_id,
        settings=get_settings(),
        sweep_in=SweepCreate.model_validate(
            {
                "name": "lr",
                "template": {**JOB, "trainer": "mlp_digits"},
                "space": {"grid": {"learning_rate": [0.1]}},
                "objective": {"metric": "accuracy", "mode": "max"},
            }
        ),
    )
    quotas.set_quota(
        session=session,
        project_name=name,
        quota_in=QuotaUpdate(max_running_replicas=2, max_queued_jobs=2),
        settings=get_settings(),
    )
    session.flush()
    result = advance.advance_sweeps(session=session, settings=get_settings())
    assert first.status is SweepStatus.FAILED and first.reason.startswith("trial 1 was refused")
    assert second.trials_created == 1 and "waiting" not in second.reason, second.reason
    created = [session.get(Job, job_id) for job_id in result.created]
    assert sorted((j.sweep_id, j.trial_index) for j in created if j is not None) == [
        (first.id, 0),
        (second.id, 0),
    ]
    assert queued(session, token.project_id) == 2


def test_a_sweep_above_the_priority_ceiling_is_refused(session: Session) -> None:
    pid = project(session, max_priority=1)
    with pytest.raises(BeyondQuota) as refused:
        sweeps.create_sweep(
            session=session,
            project_id=pid,
            settings=get_settings(),
            sweep_in=SweepCreate.model_validate(
                {
                    "name": "lr",
                    "template": {**JOB, "trainer": "mlp_digits", "priority": 2},
                    "space": {"grid": {"learning_rate": [0.1]}},
                    "objective": {"metric": "accuracy", "mode": "max"},
                }
            ),
        )
    assert refused.value.field == "template.priority"


def test_a_fire_time_over_the_queued_quota_is_skipped_with_the_reason(session: Session) -> None:
    pid = project(session, max_queued_jobs=1)
    start = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)
    schedule = schedules.create_schedule(
        session=session,
        project_id=pid,
        settings=get_settings(),
        now=start,
        schedule_in=ScheduleCreate.model_validate(
            {"name": "nightly", "job": JOB, "interval_seconds": 10}
        ),
    )
    create_job(session, pid, **JOB)
    result = firing.fire_due_schedules(
        session=session, settings=get_settings(), now=start + dt.timedelta(seconds=11)
    )
    assert result.jobs == []
    run = session.execute(
        sa.select(ScheduleRun).where(ScheduleRun.schedule_id == schedule.id)
    ).scalar_one()
    assert run.outcome == "skipped"
    assert run.reason == "project quota: 1 of 1 queued jobs; this fire time made no job"
    assert schedule.next_fire_at is not None and schedule.next_fire_at > start
