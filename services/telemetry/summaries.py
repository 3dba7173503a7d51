"""Read-only summaries the web dashboard shows and the REST API does not: the last
loss/accuracy of many jobs at once, the nodes each job runs on, the replicas live on
each node, and a project's queue in placement order. Nothing here writes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.orm import Session, aliased

from services.models import Job, MetricPoint, Replica
from services.statuses import TERMINAL_REPLICA_STATUSES, JobStatus

SUMMARY_METRICS = ("loss", "accuracy")


@dataclass
class NodeLoad:
    """The live replicas on one node: how many in all, and which ones are this project's."""

    total: int = 0
    own: list[tuple[int, str, int]] = field(default_factory=list)  # (job id, job name, index)


def read_last_metrics(
    *, session: Session, jobs: Iterable[Job], names: tuple[str, ...] = SUMMARY_METRICS
) -> dict[int, dict[str, float]]:
    """The newest value of each of `names` for each job's current attempt (mean over
    replicas at replica 0's highest step), keyed by job id."""
    jobs = list(jobs)
    if not jobs:
        return {}
    # Shaped for the (job_id, attempt, replica, step, name) unique index: the max()
    # is an index probe from the end of one replica's range, and `replica IN (...)`
    # turns the value lookup into point probes, so the cost does not grow with the
    # number of stored points (see bench/dashboard.py).
    replicas = list(range(max(job.replicas for job in jobs)))
    out: dict[int, dict[str, float]] = {}
    for name in names:
        newest = aliased(MetricPoint)
        last_step = (
            sa.select(sa.func.max(newest.step))
            .where(
                newest.job_id == Job.id,
                newest.attempt == Job.attempt,
                newest.replica == 0,
                newest.name == name,
            )
            .scalar_subquery()
        )
        rows = session.execute(
            sa.select(Job.id, sa.func.avg(MetricPoint.value))
            .join(
                MetricPoint,
                sa.and_(
                    MetricPoint.job_id == Job.id,
                    MetricPoint.attempt == Job.attempt,
                    MetricPoint.replica.in_(replicas),
                    MetricPoint.step == last_step,
                    MetricPoint.name == name,
                ),
            )
            .where(Job.id.in_([job.id for job in jobs]))
            .group_by(Job.id)
        ).all()
        for job_id, value in rows:
            out.setdefault(job_id, {})[name] = float(value)
    return out


def read_job_nodes(*, session: Session, jobs: Iterable[Job]) -> dict[int, list[str]]:
    """The distinct nodes the current attempt of each job was placed on, keyed by job id."""
    attempts = {job.id: job.attempt for job in jobs}
    if not attempts:
        return {}
    rows = session.execute(
        sa.select(Replica.job_id, Replica.attempt, Replica.node_id)
        .where(Replica.job_id.in_(attempts))
        .distinct()
        .order_by(Replica.node_id)
    ).all()
    out: dict[int, list[str]] = {}
    for job_id, attempt, node_id in rows:
        if attempt == attempts[job_id]:
            out.setdefault(job_id, []).append(node_id)
    return out


def read_node_loads(*, session: Session, project_id: int) -> dict[str, NodeLoad]:
    """Live replicas per node; only the caller's project's replicas are named."""
    rows = session.execute(
        sa.select(Replica.node_id, Replica.index, Job.id, Job.name, Job.project_id)
        .join(Job, Job.id == Replica.job_id)
        .where(Replica.status.not_in(TERMINAL_REPLICA_STATUSES))
        .order_by(Job.id, Replica.index)
    ).all()
    loads: dict[str, NodeLoad] = {}
    for node_id, index, job_id, job_name, owner in rows:
        load = loads.setdefault(node_id, NodeLoad())
        load.total += 1
        if owner == project_id:
            load.own.append((job_id, job_name, index))
    return loads


def read_queue(*, session: Session, project_id: int) -> list[Job]:
    """The project's waiting jobs in the order the scheduler considers them:
    highest priority first, then oldest (see services/cluster/placement.py)."""
    return list(
        session.execute(
            sa.select(Job)
            .where(Job.project_id == project_id, Job.status == JobStatus.QUEUED)
            .order_by(Job.priority.desc(), Job.id)
        ).scalars()
    )
