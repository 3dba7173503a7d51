"""Stragglers recorded and nodes quarantined by the scheduling pass, against PostgreSQL:
a node whose replicas fail for the node's reasons is cordoned and offered nothing, a
program's own errors quarantine nothing, a lifted cordon forgives the faults before it;
a straggler found in a running gang's figures is recorded once with its job's event.
The clock is passed in; the real slowdown is tests/faults/test_stragglers.py."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest
from sqlalchemy.orm import Session

from services.cluster import drains, stragglers
from services.cluster.nodes import Heartbeat, record_heartbeat
from services.cluster.quarantine import quarantine_nodes
from services.cluster.stragglers import stragglers_by_node
from services.jobs import store as jobs
from services.models import JobEvent, MetricPoint, Node, Replica, Straggler
from services.settings import get_settings
from services.statuses import JobStatus, NodeCordon, ReplicaStatus
from tests.factories import create_job, create_token
from tests.services.test_failures import T0, fail_replica, run, start_gang


@pytest.fixture
def one_node_may_be_quarantined(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """These tests' cluster is one node, which the default share (half) never quarantines."""
    monkeypatch.setenv("COHORT_QUARANTINE_MAX_SHARE", "1")
    get_settings.cache_clear()
    yield
    monkeypatch.delenv("COHORT_QUARANTINE_MAX_SHARE")
    get_settings.cache_clear()


def failed_jobs(session: Session, code: int, count: int) -> None:
    _, token = create_token(session)
    for _ in range(count):
        job = create_job(session, token.project_id, replicas=1, restart_policy="never")
        start_gang(session, job, T0)
        fail_replica(session, job, 0, code, T0)
        assert job.status is JobStatus.FAILED


@pytest.mark.usefixtures("one_node_may_be_quarantined")
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
    assert waiting.reason.startswith("every node is drained or quarantined (1)"), waiting.reason
    drains.undrain_node(session=session, node_id="n1", at=T0 + dt.timedelta(seconds=2))
    run(session, T0 + dt.timedelta(seconds=3))
    assert node.cordon is None  # the faults before the lift no longer count
    assert waiting.status is JobStatus.SCHEDULED
    assert [r.node_id for r in jobs.read_replicas(session=session, job=waiting)] == ["n1"]


@pytest.mark.usefixtures("one_node_may_be_quarantined")
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


def lost_replicas(session: Session, node_id: str, attempts: int, replicas: int) -> None:
    """`attempts` attempts of one job, each losing `replicas` replicas on `node_id` at T0."""
    _, token = create_token(session)
    job = create_job(session, token.project_id, replicas=replicas)
    for attempt in range(1, attempts + 1):
        for index in range(replicas):
            session.add(
                Replica(
                    job_id=job.id,
                    attempt=attempt,
                    index=index,
                    node_id=node_id,
                    address="10.1.0.9",
                    port=29500 + index,
                    status=ReplicaStatus.LOST,
                    failure=f"lost: node {node_id} stopped answering",
                    finished_at=T0,
                )
            )
    session.flush()


def nodes(session: Session, *ids: str) -> list[Node]:
    return [record_heartbeat(session=session, beat=Heartbeat(n, "10.1.0.9", 4, 0, T0)) for n in ids]


def test_a_gang_lost_at_once_is_one_incident_not_one_per_replica(session: Session) -> None:
    [n1, _n2, _n3, _n4] = nodes(session, "n1", "n2", "n3", "n4")
    lost_replicas(session, "n1", attempts=2, replicas=3)  # two incidents, six replicas
    assert quarantine_nodes(session=session, settings=get_settings(), now=T0) == []
    assert n1.cordon is None
    lost_replicas(session, "n1", attempts=1, replicas=1)  # the third
    assert quarantine_nodes(session=session, settings=get_settings(), now=T0) == [n1]
    assert n1.cordon_reason.startswith("quarantined: 3 replicas failed or straggled here")


def test_no_more_than_half_the_live_nodes_are_quarantined(session: Session) -> None:
    """Faults on every node alike (a bad release, an outage) are not a node's: quarantining
    them all would stop all work."""
    cluster = nodes(session, "n1", "n2", "n3")
    for node in cluster:
        lost_replicas(session, node.id, attempts=3, replicas=1)
    quarantined = quarantine_nodes(session=session, settings=get_settings(), now=T0)
    assert [n.id for n in quarantined] == ["n1"]  # int(3 x 0.5): one of three
    assert [n.id for n in cluster if n.cordon is NodeCordon.QUARANTINE] == ["n1"]
    assert quarantine_nodes(session=session, settings=get_settings(), now=T0) == []
    assert nodes(session, "n4") and quarantine_nodes(
        session=session, settings=get_settings(), now=T0
    ) == [cluster[1]]  # a fourth node makes room for a second
