"""What a pending replica's agent says it is doing (ReplicaPreparing), against PostgreSQL:
kept on the replica until it starts, recorded as an event of its job that changes no
status, and nothing for a replica already started or an attempt gone by."""

from __future__ import annotations

from sqlalchemy.orm import Session

from services.cluster import gangs
from services.cluster.preparing import record_replica_preparing
from services.jobs import store as jobs
from services.models import JobEvent
from services.statuses import JobStatus, ReplicaStatus
from tests.factories import create_job, create_token
from tests.services.test_failures import T0, run

NOTE = "installing 1 package: tabulate==0.9.0"


def scheduled(session: Session):  # type: ignore[no-untyped-def]
    _, token = create_token(session)
    job = create_job(session, token.project_id, replicas=2, command=["python", "train.py"])
    run(session, T0)
    assert job.status is JobStatus.SCHEDULED
    return job


def events(session: Session, job_id: int) -> list[JobEvent]:
    return list(session.query(JobEvent).filter_by(job_id=job_id).order_by(JobEvent.id))


def test_a_preparing_replica_says_so_until_it_starts(session: Session) -> None:
    job = scheduled(session)
    (replica, _) = sorted(jobs.read_replicas(session=session, job=job), key=lambda r: r.index)
    before = len(events(session, job.id))
    assert record_replica_preparing(
        session=session,
        job_id=job.id,
        attempt=job.attempt,
        index=0,
        node_id=replica.node_id,
        note=NOTE,
    )
    assert replica.status is ReplicaStatus.PENDING and replica.preparing == NOTE
    assert job.status is JobStatus.SCHEDULED  # no change of status
    (event,) = events(session, job.id)[before:]
    assert event.from_status is event.to_status is JobStatus.SCHEDULED
    assert event.reason == f"replica 0 on {replica.node_id} preparing: {NOTE}"
    assert event.log_mark is not None  # in the stream's order like any event

    gangs.record_replica_started(
        session=session, job_id=job.id, attempt=job.attempt, index=0, pid=1, at=T0
    )
    assert replica.preparing == ""
    # A late note, after the start: nothing.
    assert not record_replica_preparing(
        session=session, job_id=job.id, attempt=job.attempt, index=0, node_id="n", note=NOTE
    )
    assert replica.preparing == "" and len(events(session, job.id)) == before + 1


def test_a_note_of_another_attempt_or_replica_is_not_recorded(session: Session) -> None:
    job = scheduled(session)
    before = len(events(session, job.id))
    for attempt, index in ((job.attempt + 1, 0), (job.attempt, 7)):
        assert not record_replica_preparing(
            session=session, job_id=job.id, attempt=attempt, index=index, node_id="n", note=NOTE
        )
    assert len(events(session, job.id)) == before
