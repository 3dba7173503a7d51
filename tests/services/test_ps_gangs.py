"""A parameter_server gang against PostgreSQL: placement by role, TF_CONFIG per role, and
failure semantics as TensorFlow intends (a worker restarted in place, a chief or ps
failure restarting the gang, the evaluator never failing training, success on the
chief's exit 0). The clock is passed in."""

from __future__ import annotations

import datetime as dt

from sqlalchemy.orm import Session

from services.cluster import gangs
from services.cluster.nodes import Heartbeat
from services.jobs import store as jobs
from services.models import Job, Replica
from services.scheduling import scheduler_pass
from services.settings import get_settings
from services.statuses import JobStatus, ReplicaStatus
from services.wire.replica import StartReplica, StopReplica
from tests.factories import create_job, create_token

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
ROLES = {"chief": 1, "worker": 2, "ps": 1, "evaluator": 1}  # c0 w1 w2 p3 e4
CHIEF, WORKER, PS, EVALUATOR = 0, 1, 3, 4


def beats(at: dt.datetime) -> list[Heartbeat]:
    # Node n1 has room for 3 processes, n2 for 2: the gang of 5 spans both.
    return [Heartbeat("n1", "10.1.0.1", 3, 0, at), Heartbeat("n2", "10.1.0.2", 2, 0, at)]


def run(session: Session, now: dt.datetime) -> scheduler_pass.PassResult:
    return scheduler_pass.run_pass(
        session=session, settings=get_settings(), heartbeats=beats(now), now=now
    )


def ps_job(session: Session, **spec: object) -> Job:
    _, token = create_token(session)
    return create_job(session, token.project_id, strategy="parameter_server", roles=ROLES, **spec)


def start(session: Session, job: Job, now: dt.datetime) -> list[Replica]:
    result = run(session, now)
    assert job.status is JobStatus.SCHEDULED, job.reason
    assert len([m for m in result.messages if isinstance(m, StartReplica)]) == 5
    replicas = jobs.read_replicas(session=session, job=job)
    for replica in replicas:
        gangs.record_replica_started(
            session=session,
            job_id=job.id,
            attempt=job.attempt,
            index=replica.index,
            pid=100 + replica.index,
            at=now,
        )
    gangs.settle_job(session=session, job=job, now=now)
    assert job.status is JobStatus.RUNNING
    return replicas


def exit_(session: Session, job: Job, index: int, code: int, now: dt.datetime) -> list[object]:
    gangs.record_replica_exited(
        session=session,
        job_id=job.id,
        attempt=job.attempt,
        index=index,
        exit_code=code,
        log_tail="",
        at=now,
    )
    return list(gangs.settle_job(session=session, job=job, now=now))


def test_ps_gang_is_placed_with_roles_and_tf_config(session: Session) -> None:
    job = ps_job(session, distribution={"mixed_precision": "mixed_bfloat16"})
    result = run(session, T0)
    starts = {m.spec.index: m for m in result.messages if isinstance(m, StartReplica)}
    replicas = jobs.read_replicas(session=session, job=job)
    assert [(r.role, r.role_index) for r in replicas] == [
        ("chief", 0),
        ("worker", 0),
        ("worker", 1),
        ("ps", 0),
        ("evaluator", 0),
    ]
    # The evaluator reads the chief's checkpoint directory: same node.
    assert replicas[EVALUATOR].node_id == replicas[CHIEF].node_id
    addresses = [r.address for r in replicas]
    assert len(set(addresses)) == 5  # a port for every process
    cluster = {"chief": addresses[:1], "worker": addresses[1:3], "ps": addresses[3:4]}
    for replica in replicas[:4]:
        assert replica.tf_config == {
            "cluster": cluster,
            "task": {"type": replica.role, "index": replica.role_index},
        }
    assert replicas[EVALUATOR].tf_config == {
        "cluster": {"evaluator": [addresses[4]]},
        "task": {"type": "evaluator", "index": 0},
    }
    for index, message in starts.items():
        assert (message.spec.role, message.spec.role_index) == (
            replicas[index].role,
            replicas[index].role_index,
        )
        assert message.spec.distribution.mixed_precision == "mixed_bfloat16"
        assert message.spec.replicas == 5
        assert message.spec.profile is None


def test_a_profile_goes_only_to_the_replicas_it_names(session: Session) -> None:
    _, token = create_token(session)
    create_job(
        session,
        token.project_id,
        strategy="multi_worker_mirrored",
        replicas=3,
        profile={"steps": [3, 4], "replicas": [0, 2]},
    )
    starts = [m for m in run(session, T0).messages if isinstance(m, StartReplica)]
    assert len(starts) == 3
    for message in starts:
        profiled = message.spec.profile
        assert (profiled is not None) == (message.spec.index in (0, 2))
        assert profiled is None or (profiled.first_step, profiled.last_step) == (3, 4)


def test_success_is_the_chiefs_exit_then_the_evaluator_gets_its_grace(session: Session) -> None:
    job = ps_job(session)
    start(session, job, T0)
    messages = exit_(session, job, CHIEF, 0, T0)
    stopped = {m.index for m in messages if isinstance(m, StopReplica)}
    assert stopped == {1, 2, 3}  # workers and ps never exit by themselves
    assert job.status is JobStatus.RUNNING  # the evaluator is finishing
    for index in (1, 2, 3):
        exit_(session, job, index, 143, T0)
    assert job.status is JobStatus.RUNNING
    exit_(session, job, EVALUATOR, 0, T0 + dt.timedelta(seconds=5))
    assert job.status is JobStatus.SUCCEEDED
    assert job.reason == "the chief exited 0"


def test_an_evaluator_past_its_grace_is_stopped_and_the_job_succeeds(session: Session) -> None:
    job = ps_job(session)
    start(session, job, T0)
    exit_(session, job, CHIEF, 0, T0)
    later = T0 + dt.timedelta(seconds=get_settings().EVALUATOR_GRACE + 1)
    messages = gangs.settle_job(session=session, job=job, now=later)
    assert EVALUATOR in {m.index for m in messages if isinstance(m, StopReplica)}
    assert job.status is JobStatus.SUCCEEDED
    assert "the evaluator was stopped after its grace" in job.reason


def test_the_evaluators_failure_never_fails_training(session: Session) -> None:
    job = ps_job(session)
    start(session, job, T0)
    assert not exit_(session, job, EVALUATOR, 1, T0)
    assert job.status is JobStatus.RUNNING
    exit_(session, job, CHIEF, 0, T0)
    for index in (1, 2, 3):
        exit_(session, job, index, 143, T0)
    assert job.status is JobStatus.SUCCEEDED


def test_a_worker_restarted_in_place_keeps_the_gang(session: Session) -> None:
    job = ps_job(session)
    start(session, job, T0)
    replica = gangs.record_replica_restarted(
        session=session, job_id=job.id, attempt=1, index=WORKER, pid=999, restarts=1
    )
    assert replica is not None and replica.status is ReplicaStatus.RUNNING
    assert (replica.pid, replica.restarts) == (999, 1)
    assert not gangs.settle_job(session=session, job=job, now=T0)
    assert job.status is JobStatus.RUNNING and job.attempt == 1


def test_a_worker_past_its_restarts_restarts_the_gang(session: Session) -> None:
    # Its agent reports the exit only once PS_WORKER_RESTARTS are spent.
    job = ps_job(session, restart_policy="on_failure", max_restarts=1)
    start(session, job, T0)
    exit_(session, job, WORKER, 137, T0)
    assert job.status is JobStatus.RESTARTING


def test_a_lost_ps_restarts_the_gang(session: Session) -> None:
    job = ps_job(session, restart_policy="on_failure", max_restarts=1)
    start(session, job, T0)
    messages = exit_(session, job, PS, 137, T0)
    assert job.status is JobStatus.RESTARTING
    assert "replica 3" in job.reason
    assert {m.index for m in messages if isinstance(m, StopReplica)} == {0, 1, 2, 4}


def test_a_failed_chief_fails_the_job_without_restarts(session: Session) -> None:
    job = ps_job(session)
    start(session, job, T0)
    exit_(session, job, CHIEF, 1, T0)
    assert job.status is JobStatus.FAILED


def test_only_the_chief_is_watched_for_progress(session: Session) -> None:
    job = ps_job(session, restart_policy="on_failure", max_restarts=1)
    replicas = start(session, job, T0)
    running = frozenset((job.id, 1, r.index) for r in replicas)
    late = T0 + dt.timedelta(seconds=get_settings().STARTUP_TIMEOUT + 1)
    hb = [
        Heartbeat("n1", "10.1.0.1", 3, 0, late, running=running),
        Heartbeat("n2", "10.1.0.2", 2, 0, late, running=running),
    ]
    # The chief beats progress; its servers and the evaluator never do, and are fine.
    scheduler_pass.run_pass(
        session=session,
        settings=get_settings(),
        heartbeats=hb,
        now=late,
        progress={(job.id, 1, CHIEF): late.timestamp()},
    )
    assert job.status is JobStatus.RUNNING, job.reason
    # A chief without progress is hung: the gang restarts.
    later = late + dt.timedelta(seconds=get_settings().PROGRESS_TIMEOUT + 1)
    hb = [Heartbeat(b.node_id, b.address, b.slots, 0, later, running=running) for b in hb]
    scheduler_pass.run_pass(session=session, settings=get_settings(), heartbeats=hb, now=later)
    assert job.status is JobStatus.RESTARTING
    assert "replica 0" in job.reason and "hung" in job.reason
