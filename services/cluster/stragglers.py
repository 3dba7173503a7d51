"""Stragglers named: each running gang's replicas' busy seconds per step read from SQL,
compared (straggler_runs.py), and a straggler found recorded once per attempt: a
`Straggler` row (what the Prometheus counter and quarantine count, by node) and an event
in its job's history, which the job page and `cohort job events` show.

The figures are `busy_step_time` points, which every replica's resource sampler writes
every few seconds (workers/replica/busy_time.py); partial indexes hold those alone
(migration 0032), so reading a replica's newest is a read of that many index entries,
whatever else the job reports. The leader remembers the newest it has read (`BusyMark`):
a pass judges only the gangs with new figures since the last pass that committed, so a
pass over thousands of running gangs with none new costs one read of an index's end.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.cluster.straggler_runs import Finding, Report, find_stragglers
from services.jobs.transitions import note_job
from services.models import Job, MetricPoint, Replica, Straggler
from services.settings import Settings
from services.statuses import JobStatus

BUSY = "busy_step_time"
# Reports read per replica at most: a run of STRAGGLER_STEPS steps needs at most one a
# step, and one more to start it.
MAX_REPORTS = 200


@dataclass
class BusyMark:
    """The leader's memory between passes (as its placement memo): the id of the newest
    busy_step_time point a committed pass had seen; None: none yet (a new term judges
    every running gang once)."""

    seen: int | None = None
    pending: int | None = None

    def committed(self) -> None:
        """The pass that read `pending` committed: the next reads only what is newer."""
        self.seen = self.pending


def name_stragglers(
    *, session: Session, settings: Settings, now: dt.datetime, mark: BusyMark | None = None
) -> list[Straggler]:
    """Find and record the stragglers of every running gang of two replicas or more (each
    replica named once an attempt), of those with new figures since `mark` if given;
    returns the new rows."""
    running = sa.select(Job.id, Job.attempt).where(
        Job.status == JobStatus.RUNNING, Job.replicas > 1
    )
    if mark is not None:
        newest = session.execute(
            sa.select(MetricPoint.id)
            .where(MetricPoint.name == BUSY)
            .order_by(MetricPoint.id.desc())
            .limit(1)
        ).scalar_one_or_none()
        seen, mark.pending = mark.seen, newest
        if seen is not None:
            if newest is None or newest <= seen:
                return []
            fresh = sa.select(MetricPoint.job_id).where(
                MetricPoint.name == BUSY, MetricPoint.id > seen, MetricPoint.id <= newest
            )
            running = running.where(Job.id.in_(fresh))
    gangs = session.execute(running).all()
    if not gangs:
        return []
    named = set(
        session.execute(
            sa.select(Straggler.job_id, Straggler.attempt, Straggler.replica).where(
                Straggler.job_id.in_([g.id for g in gangs])
            )
        ).tuples()
    )
    found: list[Straggler] = []
    for job_id, attempt in gangs:
        reports = _reports(session, job_id, attempt, settings.STRAGGLER_STEPS)
        for finding in find_stragglers(
            reports, factor=settings.STRAGGLER_FACTOR, steps=settings.STRAGGLER_STEPS
        ):
            if (job_id, attempt, finding.replica) in named:
                continue
            row = _record(session, job_id, attempt, finding, settings, now)
            if row is not None:
                found.append(row)
    return found


def _reports(session: Session, job_id: int, attempt: int, steps: int) -> dict[int, list[Report]]:
    """Each replica's newest `busy_step_time` reports (the partial index's entries)."""
    limit = min(MAX_REPORTS, steps + 1)
    reports: dict[int, list[Report]] = defaultdict(list)
    replicas = session.execute(
        sa.select(Replica.index).where(Replica.job_id == job_id, Replica.attempt == attempt)
    ).scalars()
    for index in replicas:
        rows = session.execute(
            sa.select(MetricPoint.step, MetricPoint.value)
            .where(
                MetricPoint.job_id == job_id,
                MetricPoint.attempt == attempt,
                MetricPoint.replica == index,
                MetricPoint.name == BUSY,
            )
            .order_by(MetricPoint.step.desc())
            .limit(limit)
        ).all()
        if rows:
            reports[index] = [Report(step, value) for step, value in rows]
    return reports


def _record(
    session: Session,
    job_id: int,
    attempt: int,
    finding: Finding,
    settings: Settings,
    now: dt.datetime,
) -> Straggler | None:
    """The straggler's row and its job's event (none for a job that moved on meanwhile)."""
    node_id = session.execute(
        sa.select(Replica.node_id).where(
            Replica.job_id == job_id, Replica.attempt == attempt, Replica.index == finding.replica
        )
    ).scalar_one()
    ratio = finding.busy_step_time / finding.peers_step_time
    reason = (
        f"replica {finding.replica} on node {node_id} is a straggler: busy "
        f"{finding.busy_step_time * 1000:.1f} ms a step against its peers' median of "
        f"{finding.peers_step_time * 1000:.1f} ms ({ratio:.1f}x, above "
        f"{settings.STRAGGLER_FACTOR:g}x) over steps {finding.first_step}-{finding.last_step}"
    )
    if not note_job(session=session, job_id=job_id, attempt=attempt, reason=reason):
        return None
    row = Straggler(
        job_id=job_id,
        attempt=attempt,
        replica=finding.replica,
        node_id=node_id,
        first_step=finding.first_step,
        last_step=finding.last_step,
        busy_step_time=finding.busy_step_time,
        peers_step_time=finding.peers_step_time,
        found_at=now,
    )
    session.add(row)
    session.flush()
    return row


def stragglers_by_node(session: Session) -> dict[str, int]:
    """How many stragglers were ever named on each node (the Prometheus counter)."""
    rows = session.execute(
        sa.select(Straggler.node_id, sa.func.count()).group_by(Straggler.node_id)
    ).tuples()
    return dict(rows.all())
