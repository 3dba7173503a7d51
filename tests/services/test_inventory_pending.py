"""A node whose agent has not yet listed its GPUs: beating, not offered to the placer, and
no job is called unschedulable for it (a pass on PostgreSQL)."""

from __future__ import annotations

import datetime as dt

from sqlalchemy.orm import Session

from services.cluster.nodes import Heartbeat, mark_lost_nodes
from services.jobs import store as jobs
from services.models import Job, Node, utcnow
from services.scheduling import scheduler_pass
from services.settings import get_settings
from services.statuses import JobStatus, NodeStatus
from tests.factories import create_job, create_token


def beat(
    node_id: str,
    at: dt.datetime,
    gpu_ids: tuple[int, ...] = (),
    pending: bool = False,
    slots: int = 2,
) -> Heartbeat:
    return Heartbeat(
        node_id=node_id,
        address="10.3.0.1",
        slots=slots,
        gpus=len(gpu_ids),
        at=at,
        after=at - dt.timedelta(seconds=1),
        gpu_ids=gpu_ids,
        inventory_pending=pending,
    )


def run(session: Session, *beats: Heartbeat) -> scheduler_pass.PassResult:
    return scheduler_pass.run_pass(session=session, settings=get_settings(), heartbeats=list(beats))


def gpu_job_of(session: Session) -> Job:
    _, token = create_token(session)
    return create_job(
        session, token.project_id, replicas=2, gpus_per_replica=1, strategy="multi_worker_mirrored"
    )


def test_a_gpu_job_waits_for_a_pending_inventory_and_is_placed_once_it_arrives(
    session: Session,
) -> None:
    job = gpu_job_of(session)
    start = utcnow()
    for seconds in range(3):  # the agent probes its GPUs for a few beats
        result = run(session, beat("g1", start + dt.timedelta(seconds=seconds), pending=True))
        assert result.placed == []
        node = session.get(Node, "g1")
        assert node is not None and node.status is NodeStatus.PENDING
        assert job.status is JobStatus.QUEUED, job.reason
        assert not job.reason.startswith("unschedulable"), job.reason
        assert job.reason == (
            "inventory pending on node g1: needs 2 GPUs (1 per replica × 2), "
            "the ready nodes have 0 GPUs"
        )

    result = run(session, beat("g1", start + dt.timedelta(seconds=3), gpu_ids=(0, 1)))
    assert result.placed == [job.id]
    node = session.get(Node, "g1")
    assert node is not None and node.status is NodeStatus.READY
    replicas = jobs.read_replicas(session=session, job=job)
    assert sorted(r.gpu_ids for r in replicas) == ["0", "1"]


def test_a_pending_node_next_to_a_ready_one_keeps_jobs_from_being_unschedulable(
    session: Session,
) -> None:
    job = gpu_job_of(session)
    now = utcnow()
    run(session, beat("c1", now), beat("g1", now, pending=True), beat("g2", now, pending=True))
    assert job.status is JobStatus.QUEUED
    assert job.reason.startswith("inventory pending on nodes g1, g2: needs 2 GPUs"), job.reason

    # The inventories arrive, without GPUs: now the job is unschedulable, and says so.
    later = now + dt.timedelta(seconds=1)
    run(session, beat("c1", later), beat("g1", later), beat("g2", later))
    assert job.reason.startswith("unschedulable: needs 2 GPUs"), job.reason


def test_a_pending_node_offers_no_cpu_slot_either_until_its_inventory_is_known(
    session: Session,
) -> None:
    _, token = create_token(session)
    job = create_job(session, token.project_id, replicas=1, strategy="one_device")
    now = utcnow()
    run(session, beat("g1", now, pending=True))
    assert job.status is JobStatus.QUEUED
    assert job.reason.startswith("inventory pending on node g1: "), job.reason
    result = run(session, beat("g1", now + dt.timedelta(seconds=1)))
    assert result.placed == [job.id]


def test_an_agent_restarting_makes_its_node_pending_and_a_silent_pending_node_is_lost(
    session: Session,
) -> None:
    now = utcnow()
    run(session, beat("g1", now, gpu_ids=(0,)))
    node = session.get(Node, "g1")
    assert node is not None and node.status is NodeStatus.READY
    run(session, beat("g1", now + dt.timedelta(seconds=1), pending=True))
    assert node.status is NodeStatus.PENDING

    lost = mark_lost_nodes(
        session=session, now=now + dt.timedelta(seconds=60), timeout=get_settings().NODE_TIMEOUT
    )
    assert lost == ["g1"] and node.status is NodeStatus.LOST
