"""Whether placement's inputs changed since the leader's last pass that placed nothing.

A pass reads the whole queue, every live replica and every ready node to place, which on
a full cluster with a long queue is most of its work, and most passes then place nothing
and find every waiting job's reason as it was: the placer is pure, so the same inputs
give the same result. So the leader keeps the digest of what its last committed pass
read and left (`PlacementMemo`), when that pass placed nothing and no job was in its
restart backoff (whose reason counts the seconds down); a pass whose inputs have the same
digest skips the queue's read, the placer and the reasons.

The digest is one query of aggregates, computed by the database (PostgreSQL only: other
databases give none, and every pass places):

* the queued jobs: how many, the sum and largest of their ids, their latest `updated_at`
  (every write of a job sets it: a job queued again, a reason), and how many wait out a
  restart backoff. Ids only grow, so a set with a job gone and another come has another
  count or sum;
* the live replicas (what capacity and fair sharing subtract): how many, the sum and
  largest of their ids (a replica's node, port and GPUs never change);
* the ready nodes' capacity columns (not their heartbeat times), and the projects'
  quotas, each as the md5 of their rows in key order.

A digest that differs when nothing that matters changed (a node's busy ports listed in
another order) costs one ordinary pass; nothing that placement reads changes without
changing it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import aggregate_order_by
from sqlalchemy.orm import Session

from services.cluster.node_capacity import PLACEABLE_NODE, PLACED_NODE_COLUMNS
from services.models import Job, Node, ProjectQuota, Replica
from services.statuses import TERMINAL_REPLICA_STATUSES, JobStatus

Digest = tuple[object, ...]


@dataclass
class PlacementMemo:
    """The leader's memory of its last committed pass that placed nothing: the digest
    of the inputs it read and left. Kept by the scheduler through its term."""

    idle: Digest | None = None
    pending: Digest | None = None  # this pass's, until its transaction commits

    def begin(self) -> None:
        """A pass starts: nothing of it counts until it commits."""
        self.pending = None

    def committed(self) -> None:
        """The pass committed: what it left is what the next pass compares with."""
        self.idle, self.pending = self.pending, None

    def forget(self) -> None:
        self.idle = self.pending = None


def _rows_md5(
    *columns: sa.ColumnExpressionArgument[Any], key: sa.ColumnExpressionArgument[Any]
) -> sa.ColumnElement[str]:
    """The md5 of the rows' `columns`, in `key` order (NULL for no rows)."""
    row = sa.func.concat_ws("|", *columns)
    return sa.func.md5(sa.func.string_agg(row, aggregate_order_by(sa.literal(";"), key)))


def read_digest(*, session: Session, now: dt.datetime) -> Digest | None:
    """The digest of what placement would read now; None on a database without one."""
    if session.get_bind().dialect.name != "postgresql":
        return None
    queue = (
        sa.select(
            sa.func.count(),
            sa.func.sum(Job.id),
            sa.func.max(Job.id),
            sa.func.max(Job.updated_at),
            sa.func.count().filter(Job.not_before > now),
        )
        .where(Job.status == JobStatus.QUEUED)
        .subquery()
    )
    live = (
        sa.select(sa.func.count(), sa.func.sum(Replica.id), sa.func.max(Replica.id))
        .where(Replica.status.not_in(TERMINAL_REPLICA_STATUSES))
        .subquery()
    )
    ready = sa.select(_rows_md5(*PLACED_NODE_COLUMNS, key=Node.id)).where(PLACEABLE_NODE).subquery()
    quotas = sa.select(
        _rows_md5(
            ProjectQuota.project_id,
            ProjectQuota.max_queued_jobs,
            ProjectQuota.max_running_replicas,
            ProjectQuota.max_gpus,
            ProjectQuota.max_schedules,
            ProjectQuota.max_priority,
            ProjectQuota.updated_at,
            key=ProjectQuota.project_id,
        ),
    ).subquery()
    # Four one-row aggregates side by side: one round trip.
    one_row = queue.join(live, sa.true()).join(ready, sa.true()).join(quotas, sa.true())
    row = session.execute(
        sa.select(*queue.c, *live.c, *ready.c, *quotas.c).select_from(one_row)
    ).one()
    return tuple(row)


def in_backoff(digest: Digest) -> bool:
    """Whether some queued job of `digest` waits out a restart backoff."""
    return bool(digest[4])
