"""Stragglers named: each running gang's replicas' busy seconds per step read as they
arrive, compared (straggler_runs.py), and a straggler found recorded once per attempt: a
`Straggler` row (what the Prometheus counter and quarantine count, by node) and an event
in its job's history, which the job page and `cohort job events` show.

The figures are `busy_step_time` points, which every replica's resource sampler writes
every few seconds (workers/replica/busy_time.py). The leader keeps each replica's newest
in memory (`BusyWindow`, as it keeps its placement memo) and reads from SQL only the
points stored since its last pass, through a partial index of those points by id
(migration 0032): a pass costs one read of that index's new entries, however many gangs
run, and judges only the gangs that sent figures since. The ingest stores points one
commit at a time in id order (workers/control/ingest.py), so an id once read has no
smaller one committed after it. A new leader starts from the newest id: it judges a gang
again once the gang's replicas have sent enough new figures.
"""

from __future__ import annotations

import datetime as dt
from collections import deque
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.cluster.straggler_runs import Finding, Report, find_stragglers
from services.jobs.transitions import note_job
from services.models import Job, MetricPoint, Replica, Straggler
from services.settings import Settings
from services.statuses import JobStatus

BUSY = "busy_step_time"
# Written out, not bound: PostgreSQL uses a partial index only for a condition it can see
# implies the index's, which a generic plan's parameter does not show.
IS_BUSY = sa.text("metric_points.name = 'busy_step_time'")
# Reports kept per replica at most: a run of STRAGGLER_STEPS steps needs at most one a
# step, and one more to start it.
MAX_REPORTS = 200
# Points read per pass at most (the rest in the next): a bound on a pass after a long gap.
MAX_READ = 50_000

PRUNE_EVERY = 200  # passes between two prunings of ended gangs' reports

Gang = tuple[int, int]  # (job, attempt)


@dataclass
class BusyWindow:
    """The leader's memory between passes: the id of the newest busy_step_time point it
    read (None: none yet; a new term starts at the newest), and each replica's newest
    reports, by gang."""

    seen: int | None = None
    reports: dict[Gang, dict[int, deque[Report]]] = field(default_factory=dict)
    passes: int = 0

    def read_new(self, session: Session, keep: int) -> set[Gang]:
        """Read the points stored since the last read; the gangs that sent any."""
        if self.seen is None:
            newest = session.execute(
                sa.select(MetricPoint.id).where(IS_BUSY).order_by(MetricPoint.id.desc()).limit(1)
            ).scalar_one_or_none()
            self.seen = newest or 0
            return set()
        rows = session.execute(
            sa.select(
                MetricPoint.id,
                MetricPoint.job_id,
                MetricPoint.attempt,
                MetricPoint.replica,
                MetricPoint.step,
                MetricPoint.value,
            )
            .where(IS_BUSY, MetricPoint.id > self.seen)
            .order_by(MetricPoint.id)
            .limit(MAX_READ)
        ).all()
        touched: set[Gang] = set()
        for point_id, job_id, attempt, replica, step, value in rows:
            gang = (job_id, attempt)
            replicas = self.reports.setdefault(gang, {})
            replicas.setdefault(replica, deque(maxlen=keep)).append(Report(step, value))
            touched.add(gang)
            self.seen = point_id
        return touched

    def forget(self, gangs: set[Gang]) -> None:
        """Drop the reports of gangs that no longer run."""
        for gang in gangs:
            self.reports.pop(gang, None)

    def prune(self, session: Session) -> None:
        """Every PRUNE_EVERY passes, drop the reports of gangs that ended without sending
        another figure (their job's last ones were read while it ran)."""
        self.passes += 1
        if self.passes % PRUNE_EVERY or not self.reports:
            return
        running = set(
            session.execute(
                sa.select(Job.id, Job.attempt).where(Job.status == JobStatus.RUNNING)
            ).tuples()
        )
        self.forget(set(self.reports) - running)


def name_stragglers(
    *, session: Session, settings: Settings, now: dt.datetime, window: BusyWindow | None = None
) -> list[Straggler]:
    """Find and record the stragglers among the running gangs of two replicas or more that
    sent figures since the window's last read (each replica named once an attempt);
    returns the new rows. Without a window (a one-off pass), every figure stored is read."""
    window = window if window is not None else BusyWindow(seen=0)
    window.prune(session)
    touched = window.read_new(session, min(MAX_REPORTS, settings.STRAGGLER_STEPS + 1))
    if not touched:
        return []
    running = set(
        session.execute(
            sa.select(Job.id, Job.attempt).where(
                Job.id.in_({job_id for job_id, _ in touched}),
                Job.status == JobStatus.RUNNING,
                Job.replicas > 1,
            )
        ).tuples()
    )
    window.forget(touched - running)
    named = set(
        session.execute(
            sa.select(Straggler.job_id, Straggler.attempt, Straggler.replica).where(
                Straggler.job_id.in_({job_id for job_id, _ in running})
            )
        ).tuples()
    )
    found: list[Straggler] = []
    for job_id, attempt in sorted(running):
        reports = window.reports.get((job_id, attempt), {})
        for finding in find_stragglers(
            reports, factor=settings.STRAGGLER_FACTOR, steps=settings.STRAGGLER_STEPS
        ):
            if (job_id, attempt, finding.replica) in named:
                continue
            row = _record(session, job_id, attempt, finding, settings, now)
            if row is not None:
                found.append(row)
    return found


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
