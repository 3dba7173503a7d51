"""A scheduling pass against PostgreSQL: registration, placement, gang outcome, lost nodes."""

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.cluster import gangs, queue_placement
from services.cluster.nodes import Heartbeat, mark_lost_nodes, record_heartbeats
from services.cluster.placement import ReplicaPlacement
from services.jobs import store as jobs
from services.models import Job, Node, utcnow
from services.scheduling import scheduler_pass
from services.settings import get_settings
from services.statuses import JobStatus, NodeStatus, ReplicaStatus
from services.wire.replica import StartReplica, StopReplica
from tests.factories import create_job, create_token


def beat(node_id: str, slots: int = 2, at: dt.datetime | None = None) -> Heartbeat:
    at = at or utcnow()
    return Heartbeat(
        node_id=node_id, address=f"10.1.0.{node_id[-1]}", slots=slots, gpus=0, at=at, after=at
    )


def run(
    session: Session, *beats: Heartbeat, now: dt.datetime | None = None
) -> scheduler_pass.PassResult:
    return scheduler_pass.run_pass(
        session=session, settings=get_settings(), heartbeats=list(beats), now=now
    )


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
        assert replica.tf_config == {
            "cluster": {"worker": cluster},
            "task": {"type": "worker", "index": replica.index},
        }
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
        gangs.record_replica_started(
            session=session,
            job_id=job.id,
            attempt=job.attempt,
            index=replica.index,
            pid=1000 + replica.index,
            at=utcnow(),
        )
    gangs.settle_job(session=session, job=job)


def test_gang_runs_then_succeeds(session: Session) -> None:
    _, token = create_token(session)
    job = create_job(session, token.project_id, replicas=2)
    run(session, beat("n1"))
    _start_all(session, job)
    assert job.status is JobStatus.RUNNING
    gangs.record_replica_exited(
        session=session, job_id=job.id, attempt=1, index=0, exit_code=0, log_tail="", at=utcnow()
    )
    gangs.settle_job(session=session, job=job)
    assert job.status is JobStatus.RUNNING  # one of two is not enough
    gangs.record_replica_exited(
        session=session, job_id=job.id, attempt=1, index=1, exit_code=0, log_tail="", at=utcnow()
    )
    gangs.settle_job(session=session, job=job)
    assert job.status is JobStatus.SUCCEEDED


def test_one_failure_tears_the_gang_down(session: Session) -> None:
    _, token = create_token(session)
    job = create_job(session, token.project_id, replicas=2)
    run(session, beat("n1"))
    _start_all(session, job)
    gangs.record_replica_exited(
        session=session,
        job_id=job.id,
        attempt=1,
        index=1,
        exit_code=1,
        log_tail="Traceback\nValueError: boom\n",
        at=utcnow(),
    )
    messages = gangs.settle_job(session=session, job=job)
    assert job.status is JobStatus.FAILED
    assert job.reason == (
        "replica 1 on n1 exited with code 1 (program error): Traceback | "
        "ValueError: boom; not restarted: restart_policy is never"
    )
    assert messages == [StopReplica("n1", job.id, 1, 0, get_settings().STOP_GRACE)]


def test_on_failure_restarts_with_next_attempt(session: Session) -> None:
    _, token = create_token(session)
    job = create_job(
        session, token.project_id, replicas=2, restart_policy="on_failure", max_restarts=1
    )
    run(session, beat("n1"))
    _start_all(session, job)
    gangs.record_replica_exited(
        session=session, job_id=job.id, attempt=1, index=0, exit_code=137, log_tail="", at=utcnow()
    )
    gangs.settle_job(session=session, job=job)
    assert job.status is JobStatus.RESTARTING
    # the survivor is still alive: no new gang until it is gone
    run(session, beat("n1"))
    assert job.status is JobStatus.RESTARTING
    gangs.record_replica_exited(
        session=session, job_id=job.id, attempt=1, index=1, exit_code=143, log_tail="", at=utcnow()
    )
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


def _stored(session: Session, job: Job) -> tuple[str, dt.datetime]:
    """The job's reason and updated_at as its row holds them."""
    row = session.execute(sa.select(Job.reason, Job.updated_at).where(Job.id == job.id)).one()
    return row.reason, row.updated_at


def test_waiting_reason_is_stored_and_rewritten_only_when_it_changes(session: Session) -> None:
    _, token = create_token(session)
    create_job(session, token.project_id, replicas=2)
    run(session, beat("n1"))  # takes both slots of n1
    big = create_job(session, token.project_id, replicas=2)
    small = create_job(session, token.project_id, replicas=1, strategy="one_device")
    run(session, beat("n1"))
    assert small.status is JobStatus.QUEUED  # held for the big job ahead of it
    first = _stored(session, small)
    assert first[0].startswith("needs 1 CPU slots") and first[0] == small.reason
    assert f"held for job {big.id}" in first[0]
    assert _stored(session, big)[0].startswith("needs 2 CPU slots")
    run(session, beat("n1"))
    assert _stored(session, small) == first  # the same reason: the row is not written
    run(session, beat("n1"), beat("n2", slots=4))
    assert (big.status, small.status) == (JobStatus.SCHEDULED, JobStatus.SCHEDULED)


def test_a_job_cancelled_after_the_queue_was_read_is_not_placed(session: Session) -> None:
    _, token = create_token(session)
    job = create_job(session, token.project_id, replicas=1, strategy="one_device")
    other = create_job(session, token.project_id, replicas=1, strategy="one_device")
    record_heartbeats(session=session, beats=[beat("n1")])
    # The pass read both as queued and placed them; the api cancelled one meanwhile.
    jobs.request_cancel(session=session, job=job)
    placements = {
        job.id: [ReplicaPlacement("n1", "10.1.0.1")],
        other.id: [ReplicaPlacement("n1", "10.1.0.1")],
    }
    messages, placed = queue_placement._schedule_gangs(
        session, get_settings(), placements, {}, utcnow()
    )
    assert placed == [other.id]
    assert [m.spec.job_id for m in messages if isinstance(m, StartReplica)] == [other.id]
    assert job.status is JobStatus.CANCELLED
    assert jobs.read_replicas(session=session, job=job) == []


def test_heartbeats_of_many_nodes_register_and_refresh_in_one_call(session: Session) -> None:
    start = utcnow()
    record_heartbeats(session=session, beats=[beat("n1", at=start), beat("n2", at=start)])
    mark_lost_nodes(session=session, now=start + dt.timedelta(seconds=60), timeout=15)
    later = start + dt.timedelta(seconds=61)
    record_heartbeats(session=session, beats=[beat("n1", slots=6, at=later), beat("n3", at=later)])
    rows = (
        session.execute(
            sa.select(Node.id, Node.status, Node.slots, Node.last_heartbeat).order_by(Node.id)
        )
        .tuples()
        .all()
    )
    assert rows == [
        ("n1", NodeStatus.READY, 6, later),
        ("n2", NodeStatus.LOST, 2, start),
        ("n3", NodeStatus.READY, 2, later),
    ]


def _node_rows(session: Session) -> list[tuple[object, ...]]:
    session.expire_all()
    return (
        session.execute(
            sa.select(Node.id, Node.status, Node.slots, Node.last_heartbeat).order_by(Node.id)
        )
        .tuples()
        .all()
    )


def test_a_pass_that_knows_the_nodes_rows_reads_none_of_them_and_writes_the_same(
    session: Session,
) -> None:
    start = utcnow()
    known = record_heartbeats(session=session, beats=[beat("n1", at=start), beat("n2", at=start)])
    assert set(known) == {"n1", "n2"} and known["n1"]["last_heartbeat"] == start
    later = start + dt.timedelta(seconds=2)
    statements: list[tuple[str, str]] = []

    def seen(
        _conn: object, _cursor: object, statement: str, parameters: object, *_args: object
    ) -> None:
        statements.append((statement, str(parameters)))

    engine = session.get_bind()
    sa.event.listen(engine, "before_cursor_execute", seen)
    try:
        rows = record_heartbeats(
            session=session,
            known=known,
            beats=[beat("n1", slots=6, at=later), beat("n2", at=later), beat("n3", at=later)],
        )
    finally:
        sa.event.remove(engine, "before_cursor_execute", seen)
    reads = [params for sql, params in statements if sql.lstrip().upper().startswith("SELECT")]
    assert len(reads) == 1 and "n3" in reads[0], reads  # n3's row alone, new
    assert "n1" not in reads[0] and "n2" not in reads[0], reads
    assert known["n1"]["slots"] == 2  # the caller's copy is left as it was
    assert rows["n1"]["slots"] == 6 and rows["n3"]["last_heartbeat"] == later
    assert _node_rows(session) == [
        ("n1", NodeStatus.READY, 6, later),
        ("n2", NodeStatus.READY, 2, later),
        ("n3", NodeStatus.READY, 2, later),
    ]


def test_a_node_lost_while_known_is_ready_again_when_it_beats_again(session: Session) -> None:
    start = utcnow()
    first = run(session, beat("n1", at=start), now=start)
    timeout = get_settings().NODE_TIMEOUT
    later = start + dt.timedelta(seconds=timeout + 1)
    # Its last beat is still in Redis (no news since): lost, and the pass's rows say so.
    second = scheduler_pass.run_pass(
        session=session,
        settings=get_settings(),
        heartbeats=[Heartbeat(node_id="n1", address="10.1.0.1", slots=2, gpus=0, at=start)],
        now=later,
        known_nodes=first.node_rows,
    )
    assert second.lost_nodes == ["n1"]
    assert second.node_rows["n1"]["status"] is NodeStatus.LOST
    back = later + dt.timedelta(seconds=1)
    scheduler_pass.run_pass(
        session=session,
        settings=get_settings(),
        heartbeats=[beat("n1", at=back)],
        now=back,
        known_nodes=second.node_rows,
    )
    assert _node_rows(session) == [("n1", NodeStatus.READY, 2, back)]


def test_a_beat_of_unknown_age_keeps_a_ready_node_one_timeout_and_revives_no_lost_one(
    session: Session,
) -> None:
    start = utcnow()
    timeout = get_settings().NODE_TIMEOUT
    record_heartbeats(session=session, beats=[beat("n1", at=start), beat("n2", at=start)])
    mark_lost_nodes(session=session, now=start + dt.timedelta(seconds=60), timeout=timeout)
    record_heartbeats(session=session, beats=[beat("n1", at=start + dt.timedelta(seconds=61))])
    # A new leader's first read, long after: each beat in the hash is heard then (its age
    # unknown), none is news.
    first = start + dt.timedelta(seconds=100)
    record_heartbeats(
        session=session,
        beats=[
            Heartbeat(node_id=n, address=f"10.1.0.{n[-1]}", slots=2, gpus=0, at=first)
            for n in ("n1", "n2")
        ],
    )
    assert (
        mark_lost_nodes(
            session=session, now=first + dt.timedelta(seconds=timeout - 1), timeout=timeout
        )
        == []
    )  # not everything lost at once
    statuses = dict(session.execute(sa.select(Node.id, Node.status)).tuples().all())
    assert statuses == {"n1": NodeStatus.READY, "n2": NodeStatus.LOST}  # n2 not revived
    # n1 never heard again: lost one timeout after that read, not kept for ever.
    assert mark_lost_nodes(
        session=session, now=first + dt.timedelta(seconds=timeout + 1), timeout=timeout
    ) == ["n1"]


def test_a_running_gang_with_nothing_to_settle_is_not_read_again(session: Session) -> None:
    _, token = create_token(session)
    steady = create_job(session, token.project_id, replicas=2)
    ending = create_job(session, token.project_id, replicas=2)
    run(session, beat("n1", slots=4))
    _start_all(session, steady)
    _start_all(session, ending)
    assert [j.id for j in gangs.jobs_to_settle(session=session)] == []
    # What jobs_to_settle leaves out, settle_job would leave as it is.
    assert gangs.settle_job(session=session, job=steady) == []
    assert steady.status is JobStatus.RUNNING
    gangs.record_replica_exited(
        session=session, job_id=ending.id, attempt=1, index=0, exit_code=0, log_tail="", at=utcnow()
    )
    assert [j.id for j in gangs.jobs_to_settle(session=session)] == [ending.id]


def test_an_older_attempt_never_told_to_stop_keeps_its_job_settled(session: Session) -> None:
    _, token = create_token(session)
    job = create_job(
        session,
        token.project_id,
        replicas=1,
        strategy="one_device",
        restart_policy="on_failure",
        max_restarts=1,
    )
    run(session, beat("n1"))
    _start_all(session, job)
    old = jobs.read_replicas(session=session, job=job)[0]
    # The first gang declared lost, restarted and running again, with the old replica
    # never stopped: the job is settled (and the stop sent) until it is.
    gangs.record_replica_failure(replica=old, failure="lost: test", lost=True, at=utcnow())
    gangs.settle_job(session=session, job=job)
    assert job.status is JobStatus.RESTARTING
    old.stop_requested_at = None
    run(session, beat("n1"), now=job.not_before)
    _start_all(session, job)
    assert job.status is JobStatus.RUNNING and job.attempt == 2
    old.stop_requested_at = None
    session.flush()
    assert [j.id for j in gangs.jobs_to_settle(session=session)] == [job.id]
    stops = [m for m in gangs.settle_job(session=session, job=job) if isinstance(m, StopReplica)]
    assert [(m.attempt, m.index) for m in stops] == [(1, 0)]
    assert [j.id for j in gangs.jobs_to_settle(session=session)] == []


def test_current_attempts_are_those_of_placed_and_running_jobs(session: Session) -> None:
    """What the leader writes back to Redis after a wipe (workers/control/scheduler.py)."""
    _, token = create_token(session)
    running = create_job(session, token.project_id, replicas=1)
    placed = create_job(session, token.project_id, replicas=1)
    run(session, beat("n1"))
    _start_all(session, running)
    queued = create_job(session, token.project_id, replicas=64)  # never fits
    run(session, beat("n1"))
    assert (running.status, placed.status) == (JobStatus.RUNNING, JobStatus.SCHEDULED)
    attempts = gangs.current_attempts(session=session)
    assert attempts[running.id] == 1 and attempts[placed.id] == 1
    assert queued.id not in attempts
