"""A finished job's scaling report against PostgreSQL, from stored `step_time` points
(through the ingest's own store, so the rollups the report reads are the real ones)."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session

from services.jobs.transitions import transition_job
from services.models import Job
from services.statuses import JobStatus
from services.telemetry.metrics import store_points
from services.telemetry.scaling import read_scaling
from tests.factories import create_job, create_token

TRACING = 4.0  # the first step traces the graph: seconds, left out of the report


def finished(
    session: Session,
    project_id: int,
    replicas: int,
    step_time: float,
    steps: int = 150,
    status: JobStatus = JobStatus.SUCCEEDED,
    job_fields: dict[str, object] | None = None,
    times: list[tuple[int, float]] | None = None,
    **hyperparameters: object,
) -> Job:
    """A job of `replicas` replicas that took `step_time` seconds a step for `steps`
    steps (after a slow first one), then ended in `status`; `times`: each replica's
    (step, step_time) points instead."""
    fields = {
        "strategy": "multi_worker_mirrored" if replicas > 1 else "one_device",
        **(job_fields or {}),
    }
    job = create_job(
        session,
        project_id,
        replicas=replicas,
        hyperparameters={"epochs": 1, "steps_per_epoch": steps, **hyperparameters},
        **fields,
    )
    rows = [
        {
            "job_id": job.id,
            "attempt": 1,
            "replica": replica,
            "step": step,
            "epoch": 0,
            "name": "step_time",
            "value": value,
            "ts": 1000.0 + step,
        }
        for replica in range(replicas)
        for step, value in times
        or [(s, TRACING if s == 1 else step_time) for s in range(1, steps + 1)]
    ]
    store_points(session=session, rows=rows)
    for target in (JobStatus.SCHEDULED, JobStatus.RUNNING, status):
        transition_job(session=session, job_id=job.id, target=target)
    return job


@pytest.fixture
def project_id(session: Session) -> int:
    return create_token(session)[1].project_id


def test_a_two_replica_run_is_set_against_the_one_replica_run_at_the_same_batch(
    session: Session, project_id: int
) -> None:
    base = finished(session, project_id, 1, step_time=0.1)  # 32 / 0.1 = 320 examples/s
    job = finished(session, project_id, 2, step_time=0.125)  # 256 per replica
    report = read_scaling(session=session, job=job)
    assert report is not None
    assert report.per_replica_examples_per_second == pytest.approx(256.0)
    assert report.total_examples_per_second == pytest.approx(512.0)
    assert report.baseline_job_id == base.id
    assert report.efficiency == pytest.approx(512 / (2 * 320))
    assert f"job {base.id}" in report.note and "80% efficiency" in report.note


def test_mirrored_counts_each_logical_device_of_its_one_process(
    session: Session, project_id: int
) -> None:
    job = finished(
        session,
        project_id,
        1,
        step_time=0.1,
        job_fields={"strategy": "mirrored", "distribution": {"cpu_devices": 2}},
    )
    report = read_scaling(session=session, job=job)
    assert report is not None  # 2 devices x 32 a step / 0.1 s
    assert report.per_replica_examples_per_second == pytest.approx(640.0)


def test_a_parameter_server_gang_gets_no_efficiency(session: Session, project_id: int) -> None:
    finished(session, project_id, 1, step_time=0.1)
    job = finished(
        session,
        project_id,
        4,
        step_time=0.1,
        job_fields={"strategy": "parameter_server", "roles": {"chief": 1, "worker": 2, "ps": 1}},
    )
    report = read_scaling(session=session, job=job)
    assert report is not None and report.efficiency is None
    assert report.baseline_job_id is None and "parameter_server" in report.note


def test_the_per_replica_batch_scales_the_examples(session: Session, project_id: int) -> None:
    job = finished(session, project_id, 2, step_time=0.1, batch_size=64)
    report = read_scaling(session=session, job=job)
    assert report is not None and report.per_replica_examples_per_second == pytest.approx(640)


def test_without_a_one_replica_run_at_the_same_batch_the_report_says_so(
    session: Session, project_id: int
) -> None:
    finished(session, project_id, 1, step_time=0.1, batch_size=64)  # another batch
    finished(session, project_id, 1, step_time=0.1, status=JobStatus.FAILED)  # not a success
    other = create_token(session, "elsewhere")[1].project_id
    finished(session, other, 1, step_time=0.1)  # another project's
    job = finished(session, project_id, 2, step_time=0.125)
    report = read_scaling(session=session, job=job)
    assert report is not None
    assert report.total_examples_per_second == pytest.approx(512.0)
    assert report.baseline_job_id is None and report.efficiency is None
    assert "no succeeded 1-replica run of mlp_digits at batch 32" in report.note


def test_a_run_with_the_same_hyperparameters_is_the_preferred_baseline(
    session: Session, project_id: int
) -> None:
    same = finished(session, project_id, 1, step_time=0.1, learning_rate=0.05)
    finished(session, project_id, 1, step_time=0.2)  # newer, another learning rate
    job = finished(session, project_id, 4, step_time=0.2, learning_rate=0.05)
    report = read_scaling(session=session, job=job)
    assert report is not None and report.baseline_job_id == same.id
    assert report.efficiency == pytest.approx(0.5)


def test_a_one_replica_run_is_its_own_baseline(session: Session, project_id: int) -> None:
    job = finished(session, project_id, 1, step_time=0.1)
    report = read_scaling(session=session, job=job)
    assert report is not None and report.total_examples_per_second == pytest.approx(320)
    assert report.efficiency is None and "this run is the baseline" in report.note


def test_a_running_job_has_no_report_and_one_without_timings_says_why(
    session: Session, project_id: int
) -> None:
    running = create_job(session, project_id, replicas=2)
    assert read_scaling(session=session, job=running) is None
    quiet = finished(session, project_id, 2, step_time=0.1, steps=1)  # only the first step
    report = read_scaling(session=session, job=quiet)
    assert report is not None and report.total_examples_per_second is None
    assert "no `step_time` points" in report.note


def test_sampled_steps_count_for_the_steps_they_stand_for(
    session: Session, project_id: int
) -> None:
    """A fast replica ships one step in several, each the mean time of its steps: the
    report's examples/s is every step's, though the first 50 steps weigh one each."""
    from workers.step_records import StepRecord, StepSampler

    sampler = StepSampler(per_second=10)
    clock, records = 100.0, [StepRecord(1, 0, None, "", 100.0, TRACING, 32)]
    # 600 steps of 2 ms (the 50 that set the stride, and more), then 4,000 of 4 ms.
    for step in range(2, 4602):
        step_time = 0.002 if step <= 601 else 0.004
        clock += step_time
        records.append(StepRecord(step, 0, None, "", clock, step_time, 32))
    records.append(StepRecord(4601, 0, None, "epoch_", clock, None, 32))
    shipped = [kept for record in records for kept in sampler.take(record)]
    points = [(r.step, r.step_time) for r in shipped if r.step_time is not None]
    assert len(points) < 200  # one step in 64 shipped past the first 50
    job = finished(session, project_id, 1, 0.0, steps=4601, times=points)
    report = read_scaling(session=session, job=job)
    assert report is not None
    every_step = 4600 * 32 / (600 * 0.002 + 4000 * 0.004)  # the first step left out
    assert report.per_replica_examples_per_second == pytest.approx(every_step, rel=0.01)
