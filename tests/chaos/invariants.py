"""What must hold after a soak, checked from SQL, the replicas' own files and the processes.

Each check returns its violations (a check name from CHECKS and what broke); the soak
prints how many of each and fails on any.

* terminal: every job in exactly one terminal state: its status is terminal, and its
  events hold exactly one terminal status, the last, the same as the job's;
* event path: its events, in the order they were written, are a path through the status
  table itself (services.statuses.is_allowed): `submitted` into queued first, each event
  leaving the status the one before entered, the attempt one more at each
  restarting -> queued and the same otherwise, ending at the job's attempt;
* restart budget: never more attempts than the policy allows (1 under `never`, at most
  max_restarts + 1), and cancelled only when the soak asked;
* attempts overlap: never processes of two attempts of one job alive in one sample
  (tests/chaos/processes.py);
* metrics: every (step, metric) a replica of a succeeded attempt wrote to its metrics
  file (the file the agent ships: workers/replica/report_writer.py) is stored; for every
  attempt nothing is stored that its replica did not write, nor with another value, time
  or epoch, and every stored point is counted once in its rollup (the fault tests'
  tests/faults/nothing_lost.py compares alike, log lines too). The table's unique key
  makes a second row of a point impossible; a point ingested twice shows in its rollup;
* leftover process: no replica process alive once everything settled;
* slots and ports: no replica row holding a slot (not terminal) when every job has
  ended, every ready node's free slots all its slots (the scheduler's own
  services.cluster.node_capacity.read_capacity), no port of the replica range listened on
  (this host's /proc/net/tcp, and what each agent's last heartbeat reported) but by
  what other programs listened on before the soak began;
* nodes: every agent ready again after the faults.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.cluster.node_capacity import read_capacity
from services.models import Job, JobEvent, MetricPoint, MetricRollup, Node, Replica
from services.statuses import (
    TERMINAL_REPLICA_STATUSES,
    TERMINAL_STATUSES,
    JobStatus,
    NodeStatus,
    is_allowed,
)
from tests.chaos.processes import Overlap, ReplicaSeen
from tests.faults.nothing_lost import Point, PointKey, rollup_problems, written_points
from workers import layout
from workers.node.ports import listening_ports

TERMINAL = "job not in exactly one terminal state"
PATH = "events not a path through the status table"
BUDGET = "attempts beyond the restart policy, or cancelled unasked"
OVERLAP = "two attempts of one job alive at once"
METRICS = "metrics incomplete, unlike what was written, or miscounted in a rollup"
LEFTOVER = "replica process left over"
LEAK = "slot or port leaked"
NODES = "agent not ready after the faults"
CHECKS = (TERMINAL, PATH, BUDGET, OVERLAP, METRICS, LEFTOVER, LEAK, NODES)


@dataclass(frozen=True)
class Violation:
    check: str
    detail: str

    def __str__(self) -> str:
        return f"{self.check}: {self.detail}"


def _events(session: Session, job_ids: list[int]) -> dict[int, list[JobEvent]]:
    by_job: dict[int, list[JobEvent]] = defaultdict(list)
    for event in session.execute(
        sa.select(JobEvent)
        .where(JobEvent.job_id.in_(job_ids))
        .order_by(JobEvent.job_id, JobEvent.id)
    ).scalars():
        by_job[event.job_id].append(event)
    return by_job


def event_path_problem(events: list[JobEvent], attempt: int) -> str | None:
    """Why `events` (one job's, in id order) are not a path through the status table
    ending at `attempt`; None when they are."""
    if not events:
        return "no events"
    first = events[0]
    if (
        first.from_status is not None
        or first.to_status is not JobStatus.QUEUED
        or first.attempt != 1
    ):
        return (
            f"first event {first.from_status} -> {first.to_status} (attempt "
            f"{first.attempt}), not the submission into queued in attempt 1"
        )
    expected = 1
    for before, event in zip(events, events[1:], strict=False):
        if event.from_status is not before.to_status:
            return (
                f"event {event.id} leaves {event.from_status} but the one before "
                f"entered {before.to_status}"
            )
        if not is_allowed(before.to_status, event.to_status):
            return f"event {event.id}: {before.to_status} -> {event.to_status} not allowed"
        if before.to_status is JobStatus.RESTARTING and event.to_status is JobStatus.QUEUED:
            expected += 1
        if event.attempt != expected:
            return (
                f"event {event.id} ({event.from_status} -> {event.to_status}) in "
                f"attempt {event.attempt}, expected {expected}"
            )
    if expected != attempt:
        return f"events end in attempt {expected}, the job is in attempt {attempt}"
    return None


def check_jobs(session: Session, job_ids: list[int], cancel_asked: set[int]) -> list[Violation]:
    """terminal, event path, restart budget."""
    found: list[Violation] = []
    jobs = {
        job.id: job for job in session.execute(sa.select(Job).where(Job.id.in_(job_ids))).scalars()
    }
    events = _events(session, job_ids)
    for job_id in job_ids:
        job = jobs.get(job_id)
        if job is None:
            found.append(Violation(TERMINAL, f"job {job_id} not in SQL"))
            continue
        mine = events.get(job_id, [])
        terminal = [e for e in mine if e.to_status in TERMINAL_STATUSES]
        if job.status not in TERMINAL_STATUSES:
            found.append(Violation(TERMINAL, f"job {job_id} is {job.status}: {job.reason}"))
        elif (
            len(terminal) != 1
            or mine[-1] is not terminal[0]
            or terminal[0].to_status is not job.status
        ):
            found.append(
                Violation(
                    TERMINAL,
                    f"job {job_id} is {job.status}, its terminal "
                    f"events: {[str(e.to_status) for e in terminal]}",
                )
            )
        problem = event_path_problem(mine, job.attempt)
        if problem:
            found.append(Violation(PATH, f"job {job_id}: {problem}"))
        allowed = 1 if job.restart_policy == "never" else job.max_restarts + 1
        if job.attempt > allowed:
            found.append(
                Violation(
                    BUDGET,
                    f"job {job_id}: attempt {job.attempt} under "
                    f"{job.restart_policy}, max_restarts "
                    f"{job.max_restarts}",
                )
            )
        if job.status is JobStatus.CANCELLED and job_id not in cancel_asked:
            found.append(Violation(BUDGET, f"job {job_id} cancelled, never asked: {job.reason}"))
    return found


def check_overlaps(overlaps: Iterable[Overlap], interval: float) -> list[Violation]:
    return [
        Violation(
            OVERLAP,
            f"job {o.job_id}: attempts {list(o.attempts)} alive together "
            f"in {o.samples} samples (~{o.samples * interval:.1f}s), pids "
            f"{sorted(o.pids)}",
        )
        for o in overlaps
    ]


def check_metrics(
    session: Session, job_ids: list[int], data_dirs: dict[str, Path]
) -> list[Violation]:
    """What the fault tests' nothing-lost check asks of points (tests/faults/nothing_lost.py),
    for every job: nothing stored that its replica did not write, nothing with another
    value, time or epoch; every stored point counted once in its rollup; every point of a
    succeeded attempt stored. (Not the log lines: an agent killed at random takes the lines
    it had not shipped, and which attempts it took is not tracked.)"""
    found: list[Violation] = []
    jobs = {
        job.id: job for job in session.execute(sa.select(Job).where(Job.id.in_(job_ids))).scalars()
    }
    stored: dict[int, dict[tuple[int, int], dict[PointKey, Point]]] = defaultdict(
        lambda: defaultdict(dict)
    )
    for p in session.execute(
        sa.select(
            MetricPoint.job_id,
            MetricPoint.attempt,
            MetricPoint.replica,
            MetricPoint.step,
            MetricPoint.name,
            MetricPoint.value,
            MetricPoint.ts,
            MetricPoint.epoch,
        ).where(MetricPoint.job_id.in_(job_ids))
    ):
        stored[p.job_id][(p.attempt, p.replica)][(p.step, p.name)] = (p.value, p.ts, p.epoch)
    rollups: dict[int, list[MetricRollup]] = defaultdict(list)
    for rollup in session.execute(
        sa.select(MetricRollup).where(MetricRollup.job_id.in_(job_ids))
    ).scalars():
        rollups[rollup.job_id].append(rollup)
    for job_id in job_ids:
        found += [
            Violation(METRICS, f"job {job_id}: {problem}")
            for problem in rollup_problems(stored[job_id], rollups[job_id])
        ]
    replicas = (
        session.execute(
            sa.select(Replica)
            .where(Replica.job_id.in_(job_ids))
            .order_by(Replica.job_id, Replica.attempt, Replica.index)
        )
        .scalars()
        .all()
    )
    for replica in replicas:
        key = (replica.job_id, replica.attempt, replica.index)
        job = jobs[replica.job_id]
        succeeded = job.status is JobStatus.SUCCEEDED and replica.attempt == job.attempt
        data_dir = data_dirs.get(replica.node_id)
        path = None if data_dir is None else layout.metrics_file(data_dir, *key)
        points = stored[replica.job_id].get((replica.attempt, replica.index), {})
        name = f"job {key[0]} attempt {key[1]} replica {key[2]} on {replica.node_id}"
        if path is None or not path.exists():
            if succeeded or points:
                found.append(
                    Violation(METRICS, f"{name}: no metrics file, {len(points)} points stored")
                )
            continue
        written = written_points(path)
        extra = sorted(k for k in points if k not in written)
        if extra:
            found.append(
                Violation(
                    METRICS,
                    f"{name}: {len(extra)} points stored that its file lacks, e.g. {extra[:3]}",
                )
            )
        changed = sorted(k for k in points if k in written and points[k] != written[k])
        if changed:
            found.append(
                Violation(
                    METRICS,
                    f"{name}: {len(changed)} points stored with another value, time or epoch "
                    f"than written, e.g. {changed[0]}: stored {points[changed[0]]}, "
                    f"written {written[changed[0]]}",
                )
            )
        if succeeded:
            missing = sorted(k for k in written if k not in points)
            if missing:
                found.append(
                    Violation(
                        METRICS,
                        f"{name} (succeeded): {len(missing)} of {len(written)} points never "
                        f"stored, e.g. {missing[:3]}",
                    )
                )
            if not written:
                found.append(Violation(METRICS, f"{name} (succeeded) wrote no point"))
    return found


def check_leftovers(
    live: list[ReplicaSeen], when: str, warm: Iterable[int] = ()
) -> list[Violation]:
    """Replica processes alive `when`, and warm ones (a pooled soak's, handed nothing)."""
    return [
        Violation(
            LEFTOVER,
            f"{when}: pid {r.pid}, job {r.job_id} attempt {r.attempt} "
            f"replica {r.index} on {r.node_id} (state {r.state})",
        )
        for r in live
    ] + [Violation(LEFTOVER, f"{when}: warm process pid {pid}") for pid in warm]


def check_capacity(
    session: Session, port_range: tuple[int, int], held_before: Iterable[int] = ()
) -> list[Violation]:
    """Slots and ports held once every job ended. `held_before`: ports of the range other
    programs of the host listened on before the soak began (a RabbitMQ's 25672 on a host
    whose range starts below it), which no replica of the soak can have leaked."""
    foreign = {str(port) for port in held_before}
    found = [
        Violation(
            LEAK,
            f"replica {r.index} of job {r.job_id} attempt {r.attempt} on "
            f"{r.node_id} still {r.status} (holds a slot and port "
            f"{r.port})",
        )
        for r in session.execute(
            sa.select(Replica).where(Replica.status.not_in(TERMINAL_REPLICA_STATUSES))
        ).scalars()
    ]
    capacity, _ports = read_capacity(session=session)
    found += [
        Violation(LEAK, f"{node.id}: {node.free_slots} of {node.slots} slots free")
        for node in capacity
        if node.free_slots != node.slots
    ]
    for node in session.execute(sa.select(Node)).scalars():
        busy = [p for p in map(str.strip, node.busy_ports.split(",")) if p and p not in foreign]
        if busy:
            found.append(
                Violation(LEAK, f"{node.id}'s agent reports ports of the range in use: {busy}")
            )
    held = set(listening_ports(*port_range)) - set(held_before)
    if held:
        found.append(Violation(LEAK, f"ports of the replica range listened on: {sorted(held)}"))
    return found


def check_nodes(session: Session, agents: list[str], since: dt.datetime) -> list[Violation]:
    nodes = {n.id: n for n in session.execute(sa.select(Node)).scalars()}
    found = []
    for agent in agents:
        node = nodes.get(agent)
        if node is None or node.status is not NodeStatus.READY or node.last_heartbeat < since:
            found.append(
                Violation(
                    NODES,
                    f"{agent}: "
                    + (
                        "never registered"
                        if node is None
                        else f"{node.status}, last heartbeat {node.last_heartbeat:%H:%M:%S}"
                    ),
                )
            )
    return found
