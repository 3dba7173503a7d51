"""A scheduling pass against PostgreSQL: registration, placement, gang outcome, lost nodes."""

import datetime as dt

from sqlalchemy.orm import Session

from services.cluster import gangs, reconcile
from services.cluster.nodes import Heartbeat
from services.jobs import store as jobs
from services.models import Job, utcnow
from services.settings import get_settings
from services.statuses import JobStatus, NodeStatus, ReplicaStatus
from services.wire.replica import StartReplica, StopReplica
from tests.factories import create_job, create_token


def beat(node_id: str, slots: int = 2, at: dt.datetime | None = None) -> Heartbeat:
    return Heartbeat(node_id=node_id, address=f"10.1.0.{node_id[-1]}", slots=slots, gpus=0,
                     at=at or utcnow())


def run(session: Session, *beats: Heartbeat, now: dt.datetime | None = None
        ) -> reconcile.PassResult:
    return reconcile.run_pass(session=session, settings=get_settings(), heartbeats=list(beats),
                               now=now)


def test_places_gang_with_distinct_ports_and_tf_config(session: Session) -> None:
    _, token = create_token(session)
    job = create_job(session, token.project_id, replicas=2)
    result = run(session, beat("n1"))
    assert result.placed == [job.id]
    assert job.status is JobStatus.SCHEDULED
    replicas = jobs.read_replicas(session=session, job=job)
    assert [r.index for r in replicas] == [0, 1]
    assert len({r.port for r in replicas}) == 2
    cluster = [r.address for r in replicas]
    for replica in replicas:
        assert replica.tf_config == {"cluster": {"worker": cluster},
                                     "task": {"type": "worker", "index": replica.index}}
    starts = [m for m in result.messages if isinstance(m, StartReplica)]
    assert sorted(m.spec.index for m in starts) == [0, 1]
    assert all(m.node_id == "n1" for m in starts)


def test_job_bigger_than_cluster_waits_with_reason(session: Session) -> None:
    _, token = create_token(session)
    job = create_job(session, token.project_id, replicas=5)
    run(session, beat("n1"), beat("n2"))
    assert job.status is JobStatus.QUEUED
    assert job.reason.startswith("unschedulable: needs 5 CPU slots")


def test_no_nodes_says_so(session: Session) -> None:
    _, token = create_token(session)
    job = create_job(session, token.project_id, replicas=1, strategy="one_device")
    run(session)
    assert job.reason == "waiting for a node agent to register"


def _start_all(session: Session, job: Job) -> None:
    for replica in jobs.read_replicas(session=session, job=job):
        gangs.record_replica_started(session=session, job_id=job.id, attempt=job.attempt,
                                     index=replica.index, pid=1000 + replica.index, at=utcnow())
    gangs.settle_job(session=session, job=job)


def test_gang_runs_then_succeeds(session: Session) -> None:
    _, token = create_token(session)
    job = create_job(session, token.project_id, replicas=2)
    run(session, beat("n1"))
    _start_all(session, job)
    assert job.status is JobStatus.RUNNING
    gangs.record_replica_exited(session=session, job_id=job.id, attempt=1, index=0, exit_code=0,
                                log_tail="", at=utcnow())
    gangs.settle_job(session=session, job=job)
    assert job.status is JobStatus.RUNNING  # one of two is not enough
    gangs.record_replica_exited(session=session, job_id=job.id, attempt=1, index=1, exit_code=0,
                                log_tail="", at=utcnow())
    gangs.settle_job(session=session, job=job)
    assert job.status is JobStatus.SUCCEEDED


def test_one_failure_tears_the_gang_down(session: Session) -> None:
    _, token = create_token(session)
    job = create_job(session, token.project_id, replicas=2)
    run(session, beat("n1"))
    _start_all(session, job)
    gangs.record_replica_exited(session=session, job_id=job.id, attempt=1, index=1,
                                exit_code=1, log_tail="Traceback\nValueError: boom\n",
                                at=utcnow())
    messages = gangs.settle_job(session=session, job=job)
    assert job.status is JobStatus.FAILED
    assert job.reason == ("replica 1 on n1 exited with code 1 (permanent): Traceback | "
                          "ValueError: boom; not restarted: restart_policy is never")
    assert messages == [StopReplica("n1", job.id, 1, 0, get_settings().STOP_GRACE)]


def test_on_failure_restarts_with_next_attempt(session: Session) -> None:
    _, token = create_token(session)
    job = create_job(session, token.project_id, replicas=2, restart_policy="on_failure",
                     max_restarts=1)
    run(session, beat("n1"))
    _start_all(session, job)
    gangs.record_replica_exited(session=session, job_id=job.id, attempt=1, index=0,
                                exit_code=137, log_tail="", at=utcnow())
    gangs.settle_job(session=session, job=job)
    assert job.status is JobStatus.RESTARTING
    # the survivor is still alive: no new gang until it is gone
    run(session, beat("n1"))
    assert job.status is JobStatus.RESTARTING
    gangs.record_replica_exited(session=session, job_id=job.id, attempt=1, index=1,
                                exit_code=143, log_tail="", at=utcnow())
    survivor = jobs.read_replicas(session=session, job=job, attempt=1)[1]
    assert survivor.status is ReplicaStatus.STOPPED
    assert job.not_before is not None
    result = run(session, beat("n1"), now=job.not_before)
    assert job.attempt == 2
    assert job.status is JobStatus.SCHEDULED
    assert {m.spec.attempt for m in result.messages if isinstance(m, StartReplica)} == {2}


def test_cancelled_job_replicas_get_stopped(session: Session) -> None:
    _, token = create_token(session)
    job = create_job(session, token.project_id, replicas=2)
    run(session, beat("n1"))
    _start_all(session, job)
    jobs.request_cancel(session=session, job=job)
    result = run(session, beat("n1"))
    stops = sorted(m.index for m in result.messages if isinstance(m, StopReplica))
    assert stops == [0, 1]
    # stops are not re-sent on every pass
    assert not [m for m in run(session, beat("n1")).messages if isinstance(m, StopReplica)]


def test_lost_node_fails_its_jobs(session: Session) -> None:
    _, token = create_token(session)
    job = create_job(session, token.project_id, replicas=2)
    start = utcnow()
    run(session, beat("n1", at=start), now=start)
    _start_all(session, job)
    later = start + dt.timedelta(seconds=get_settings().NODE_TIMEOUT + 1)
    result = run(session, now=later)
    assert result.lost_nodes == ["n1"]
    assert job.status is JobStatus.FAILED
    assert "node n1 stopped answering" in job.reason
    from services.models import Node
    assert session.get(Node, "n1").status is NodeStatus.LOST
