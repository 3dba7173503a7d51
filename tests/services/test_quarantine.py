"""Stragglers recorded and nodes quarantined by the scheduling pass, against PostgreSQL:
a node whose replicas fail for the node's reasons is cordoned and offered nothing, a
program's own errors quarantine nothing, a lifted cordon forgives the faults before it;
a straggler found in a running gang's figures is recorded once with its job's event.
The clock is passed in; the real slowdown is tests/faults/test_stragglers.py."""

from __future__ import annotations

import datetime as dt

from sqlalchemy.orm import Session

from services.cluster import drains, stragglers
from services.cluster.stragglers import stragglers_by_node
from services.jobs import store as jobs
from services.models import JobEvent, MetricPoint, Node, Straggler
from services.settings import get_settings
from services.statuses import JobStatus, NodeCordon
from tests.factories import create_job, create_token
from tests.services.test_failures import T0, fail_replica, run, start_gang


def failed_jobs(session: Session, code: int, count: int) -> None:
    _, token = create_token(session)
    for _ in range(count):
        job = create_job(session, token.project_id, replicas=1, restart_policy="never")
        start_gang(session, job, T0)
        fail_replica(session, job, 0, code, T0)
        assert job.status is JobStatus.FAILED


def test_a_node_whose_replicas_are_killed_is_quarantined_until_lifted(session: Session) -> None:
    failed_jobs(session, 137, 2)
    run(session, T0)
    node = session.get(Node, "n1")
    assert node is not None and node.cordon is None  # 2 of 3
    failed_jobs(session, 137, 1)
    run(session, T0)
    assert node.cordon is NodeCordon.QUARANTINE
    assert node.cordon_reason.startswith("quarantined: 3 replicas failed or straggled here")
    assert "killed by signal 9" in node.cordon_reason
    _, token = create_token(session)
    waiting = create_job(session, token.project_id, replicas=1)
    run(session, T0 + dt.timedelta(seconds=1))
    assert waiting.status is JobStatus.QUEUED  # nothing placed on a quarantined node
    drains.undrain_node(session=session, node_id="n1", at=T0 + dt.timedelta(seconds=2))
    run(session, T0 + dt.timedelta(seconds=3))
    assert node.cordon is None  # the faults before the lift no longer count
    assert waiting.status is JobStatus.SCHEDULED
    assert [r.node_id for r in jobs.read_replicas(session=session, job=waiting)] == ["n1"]


def test_program_errors_and_old_faults_quarantine_nothing(session: Session) -> None:
    failed_jobs(session, 1, 3)  # the program's error fails on any node
    run(session, T0)
    failed_jobs(session, 28, 3)  # no space: the node's, but an hour and more ago
    run(session, T0 + dt.timedelta(seconds=3601))
    node = session.get(Node, "n1")
    assert node is not None and node.cordon is None


def busy(job_id: int, attempt: int, replica: int, step: int, value: float) -> MetricPoint:
    return MetricPoint(
        job_id=job_id,
        attempt=attempt,
        replica=replica,
        step=step,
        epoch=0,
        name="busy_step_time",
        value=value,
        ts=0.0,
    )


def test_a_straggler_in_a_running_gang_is_recorded_once(session: Session) -> None:
    _, token = create_token(session)
    job = create_job(session, token.project_id, replicas=2)
    start_gang(session, job, T0)
    for step in range(0, 81, 20):  # 1 at 3x over steps 21-80, 0 steady
        session.add(busy(job.id, job.attempt, 0, step, 0.01))
        session.add(busy(job.id, job.attempt, 1, step, 0.01 if step <= 20 else 0.03))
    session.flush()
    before = stragglers_by_node(session).get("n1", 0)
    run(session, T0)
    run(session, T0 + dt.timedelta(seconds=1))  # named once
    [row] = session.query(Straggler).filter_by(job_id=job.id).all()
    assert (row.replica, row.node_id, row.first_step, row.last_step) == (1, "n1", 21, 80)
    assert stragglers_by_node(session)["n1"] == before + 1
    notes = [
        e.reason
        for e in session.query(JobEvent).filter_by(job_id=job.id).order_by(JobEvent.id)
        if "straggler" in e.reason
    ]
    assert notes == [
        "replica 1 on node n1 is a straggler: busy 30.0 ms a step against its peers' "
        "median of 10.0 ms (3.0x, above 2x) over steps 21-80"
    ]


def test_the_leaders_window_reads_only_new_figures_and_judges_their_gangs(
    session: Session,
) -> None:
    _, token = create_token(session)
    job = create_job(session, token.project_id, replicas=2)
    start_gang(session, job, T0)
    settings = get_settings()
    for step in range(0, 41, 20):  # steps 1-40 slow: not enough yet
        session.add(busy(job.id, job.attempt, 0, step, 0.01))
        session.add(busy(job.id, job.attempt, 1, step, 0.03))
    session.flush()
    window = stragglers.BusyWindow()
    # A new term starts at the newest figure: nothing read, nothing judged.
    assert (
        stragglers.name_stragglers(session=session, settings=settings, now=T0, window=window) == []
    )
    assert window.reports == {}
    for step in range(60, 121, 20):
        session.add(busy(job.id, job.attempt, 0, step, 0.01))
        session.add(busy(job.id, job.attempt, 1, step, 0.03))
    session.flush()
    # The new figures: steps 61-120 at 3x, judged from memory alone.
    [row] = stragglers.name_stragglers(session=session, settings=settings, now=T0, window=window)
    assert (row.job_id, row.replica, row.first_step, row.last_step) == (job.id, 1, 61, 120)
    assert (
        stragglers.name_stragglers(session=session, settings=settings, now=T0, window=window) == []
    )
    # The gang ends: its next figure (a late one) drops it from memory.
    job.status = JobStatus.SUCCEEDED
    session.add(busy(job.id, job.attempt, 0, 140, 0.01))
    session.flush()
    assert (
        stragglers.name_stragglers(session=session, settings=settings, now=T0, window=window) == []
    )
    assert window.reports == {}
