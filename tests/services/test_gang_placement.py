"""Gang placement through a scheduling pass on PostgreSQL: policies, GPUs, ports, queue order."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from services.cluster.nodes import Heartbeat
from services.cluster.pass_lock import PASS_LOCK_KEY
from services.jobs import queue
from services.jobs import store as jobs
from services.models import Job, utcnow
from services.scheduling import scheduler_pass
from services.settings import Settings, get_settings
from services.statuses import JobStatus
from tests.factories import create_job, create_token


def beat(
    node_id: str,
    slots: int = 2,
    gpu_ids: tuple[int, ...] = (),
    busy_ports: frozenset[int] = frozenset(),
) -> Heartbeat:
    return Heartbeat(
        node_id=node_id,
        address=f"10.2.0.{node_id[-1]}",
        slots=slots,
        gpus=len(gpu_ids),
        at=utcnow(),
        gpu_ids=gpu_ids,
        busy_ports=busy_ports,
    )


def run(
    session: Session, *beats: Heartbeat, settings: Settings | None = None
) -> scheduler_pass.PassResult:
    return scheduler_pass.run_pass(
        session=session, settings=settings or get_settings(), heartbeats=list(beats)
    )


def nodes_of(session: Session, job: Job) -> list[str]:
    return [r.node_id for r in jobs.read_replicas(session=session, job=job)]


def test_pack_by_default_spread_when_asked(session: Session) -> None:
    _, token = create_token(session)
    packed = create_job(session, token.project_id, replicas=2)
    spread = create_job(session, token.project_id, replicas=2, placement="spread")
    run(session, beat("n1", 4), beat("n2", 4))
    assert len(set(nodes_of(session, packed))) == 1
    assert sorted(nodes_of(session, spread)) == ["n1", "n2"]
    spread_tf = jobs.read_replicas(session=session, job=spread)[0].tf_config
    assert spread_tf is not None
    assert sorted(a.split(":")[0] for a in spread_tf["cluster"]["worker"]) == [
        "10.2.0.1",
        "10.2.0.2",
    ]


def test_cluster_default_policy(session: Session) -> None:
    _, token = create_token(session)
    job = create_job(session, token.project_id, replicas=2)
    settings = get_settings().model_copy(update={"PLACEMENT_POLICY": "spread"})
    run(session, beat("n1", 4), beat("n2", 4), settings=settings)
    assert sorted(nodes_of(session, job)) == ["n1", "n2"]
    assert job.placement is None  # the job keeps following the cluster's default


def test_gpu_jobs_get_the_agents_gpu_ids_disjoint(session: Session) -> None:
    _, token = create_token(session)
    first = create_job(
        session, token.project_id, replicas=1, strategy="one_device", gpus_per_replica=1
    )
    second = create_job(session, token.project_id, replicas=2, gpus_per_replica=1)
    cpu = create_job(session, token.project_id, replicas=2)
    run(session, beat("n1", 2, gpu_ids=(4, 5, 7)))
    ids = [r.gpu_ids for j in (first, second) for r in jobs.read_replicas(session=session, job=j)]
    assert sorted(ids) == ["4", "5", "7"]
    assert cpu.status is JobStatus.SCHEDULED  # GPU replicas hold GPUs, not CPU slots
    third = create_job(
        session, token.project_id, replicas=1, strategy="one_device", gpus_per_replica=1
    )
    run(session, beat("n1", 2, gpu_ids=(4, 5, 7)))
    assert third.status is JobStatus.QUEUED
    assert third.reason == "needs 1 GPUs (1 per replica × 1) on ≥1 node; 0 GPUs free"


def test_ports_other_processes_hold_are_skipped(session: Session) -> None:
    _, token = create_token(session)
    job = create_job(session, token.project_id, replicas=2)
    start = get_settings().PORT_RANGE_START
    run(session, beat("n1", 2, busy_ports=frozenset({start, start + 2})))
    ports = sorted(r.port for r in jobs.read_replicas(session=session, job=job))
    assert ports == [start + 1, start + 3]


def test_waiting_jobs_say_why_and_where_they_stand(session: Session) -> None:
    _, token = create_token(session)
    running = create_job(session, token.project_id, replicas=2)
    run(session, beat("n1", 2), beat("n2", 2))
    low = create_job(session, token.project_id, replicas=1, strategy="one_device", priority=0)
    big = create_job(session, token.project_id, replicas=4, priority=5)
    huge = create_job(session, token.project_id, replicas=9)
    run(session, beat("n1", 2), beat("n2", 2))
    assert running.status is JobStatus.SCHEDULED and running.placement is None
    assert big.reason == "needs 4 CPU slots on ≥2 nodes; 2 CPU slots free"
    assert low.reason == (
        f"needs 1 CPU slots on ≥1 node; 2 CPU slots free, held for job {big.id} ahead in the queue"
    )
    assert huge.reason == "unschedulable: needs 9 CPU slots, the cluster has 4 CPU slots"
    positions = [queue.queue_position(session=session, job=j) for j in (big, low, huge, running)]
    assert positions == [1, 2, 3, None]


def test_a_second_pass_waits_for_the_first(session: Session, engine: Engine) -> None:
    run(session, beat("n1"))  # holds the pass lock until this transaction ends
    with engine.connect() as other:
        taken = other.execute(
            sa.text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": PASS_LOCK_KEY}
        ).scalar_one()
        other.rollback()
    assert taken is False


def test_agents_on_one_network_stack_never_share_a_port(session: Session) -> None:
    # Two agents on one host (as the contention test runs them) bind in one port
    # space: a port is handed out once across both, or two replicas collide.
    _, token = create_token(session)
    job = create_job(session, token.project_id, replicas=4)
    same_host = [
        Heartbeat(
            node_id=n,
            address="127.0.0.1",
            slots=2,
            gpus=0,
            at=utcnow(),
            port_space="boot-1/netns:1",
        )
        for n in ("h1", "h2")
    ]
    run(session, *same_host)
    replicas = jobs.read_replicas(session=session, job=job)
    assert sorted(r.node_id for r in replicas) == ["h1", "h1", "h2", "h2"]
    assert len({r.port for r in replicas}) == 4
    other = create_job(session, token.project_id, replicas=2)
    run(session, beat("n3"), beat("n4"))  # other hosts, other port spaces: ports reused
    assert {r.port for r in jobs.read_replicas(session=session, job=other)} <= {
        r.port for r in replicas
    }
