"""A finished job's scaling report: examples/s per replica and in total, set against the
same trainer's 1-replica run at the same per-replica batch (scaling efficiency).

Computed on read, from the metric rollups (services/telemetry/metrics.py): the sum and
count of each replica's `step_time` points over its current attempt are a few rows per
hundred steps, so the report costs a handful of index probes and needs no column.

Why step times and not the `examples_per_sec` points: the mean of per-step rates
overweights the fast steps; examples over seconds is the throughput. The first step of
the attempt is left out: it traces the graph (seconds, against milliseconds for the
steps after it), and in a short run it would decide the figure alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Row
from sqlalchemy.orm import Session

from services.jobs.schemas import JobScaling
from services.jobs.spec_parts import Hyperparameters
from services.models import Job, MetricPoint, MetricRollup
from services.statuses import TERMINAL_STATUSES, JobStatus

STEP_TIME = "step_time"  # seconds per training step, reported by every built-in trainer
# The per-replica batch of a job that sets none (stored jobs carry it; rows made
# before the field existed may not).
DEFAULT_BATCH_SIZE = Hyperparameters.model_fields["batch_size"].default
BASELINE_CANDIDATES = 20  # newest 1-replica runs looked at for a baseline


def read_scaling(*, session: Session, job: Job) -> JobScaling | None:
    """The scaling report of a finished job (None while it runs)."""
    if job.status not in TERMINAL_STATUSES:
        return None
    per_replica = _examples_per_second(session, job)
    if not per_replica:
        return JobScaling(
            note=f"no `{STEP_TIME}` points over more than the first step: "
            "the built-in trainers report one per step"
        )
    mean = sum(per_replica) / len(per_replica)
    total = sum(per_replica)
    report = JobScaling(
        per_replica_examples_per_second=round(mean, 2), total_examples_per_second=round(total, 2)
    )
    batch = _batch_size(job)
    if job.strategy == "parameter_server":
        # Its gang counts a chief, ps and an evaluator that take no batches: replicas
        # times a 1-replica run would not be the ideal to measure against.
        report.note = "parameter_server: no scaling efficiency (not every process trains)"
        return report
    if job.replicas == 1:
        report.note = (
            f"1 replica: this run is the baseline of {_runs(job)} at batch {batch} per replica"
            if job.status == JobStatus.SUCCEEDED
            else "1 replica: a baseline only once a run succeeds"
        )
        return report
    baseline = _baseline(session, job)
    if baseline is None:
        report.note = (
            f"no succeeded 1-replica run of {_runs(job)} at batch {batch} per "
            "replica in this project to compare with; run one (a sweep over "
            "`replicas: [1, 2, 4]` does)"
        )
        return report
    base_job, base_rate = baseline
    efficiency = total / (job.replicas * base_rate)
    report.baseline_job_id = base_job.id
    report.efficiency = round(efficiency, 3)
    report.note = (
        f"{total:.1f} examples/s on {job.replicas} replicas against "
        f"{job.replicas} × {base_rate:.1f} on 1 (job {base_job.id}): "
        f"{100 * efficiency:.0f}% efficiency"
    )
    return report


def _examples_per_second(session: Session, job: Job) -> list[float]:
    """Each replica's examples/s over the current attempt, the first step left out;
    replicas with no timed step after the first are left out.

    Above a rate, a replica ships one step in several, its `step_time` the mean over the
    steps since the one shipped before it (workers/step_records.py): so each rollup
    bucket's mean (total over points) counts for the steps its points stand for, from the
    last step of the bucket before it. Where every step is a point, that is each step's
    time summed, as it always was."""
    buckets = session.execute(
        sa.select(
            MetricRollup.replica,
            MetricRollup.total,
            MetricRollup.points,
            MetricRollup.first_step,
            MetricRollup.last_step,
        )
        .where(
            MetricRollup.job_id == job.id,
            MetricRollup.attempt == job.attempt,
            MetricRollup.name == STEP_TIME,
        )
        .order_by(MetricRollup.replica, MetricRollup.bucket)
    ).all()
    if not buckets:
        return []
    starts: dict[int, int] = {}
    for replica, _, _, first, _ in buckets:
        starts.setdefault(replica, first)
    firsts = dict(
        session.execute(
            sa.select(MetricPoint.replica, MetricPoint.value).where(
                MetricPoint.job_id == job.id,
                MetricPoint.attempt == job.attempt,
                MetricPoint.name == STEP_TIME,
                sa.or_(
                    *(
                        sa.and_(MetricPoint.replica == replica, MetricPoint.step == first)
                        for replica, first in starts.items()
                    )
                ),
            )
        )
        .tuples()
        .all()
    )
    examples_per_step = _batch_size(job) * _devices(job)
    seconds, steps = _timed_steps(buckets, firsts)
    return [
        steps[replica] * examples_per_step / seconds[replica]
        for replica in seconds
        if steps[replica] > 0 and seconds[replica] > 0
    ]


def _timed_steps(
    buckets: Sequence[Row[int, float, int, int, int]], firsts: dict[int, float]
) -> tuple[dict[int, float], dict[int, int]]:
    """Per replica, the seconds and the steps of its buckets (in step order), its first
    step out: `(seconds, steps)`."""
    seconds: dict[int, float] = {}
    steps: dict[int, int] = {}
    before: dict[int, int] = {}  # replica: the last step of its bucket before
    for replica, total, points, first, last in buckets:
        if replica not in before and replica in firsts:  # the attempt's first step: out
            total, points, stood_for = total - firsts[replica], points - 1, last - first
        elif replica not in before:
            stood_for = last - first + 1
        else:
            stood_for = last - before[replica]
        before[replica] = last
        seconds.setdefault(replica, 0.0)
        steps.setdefault(replica, 0)
        if points > 0:
            seconds[replica] += total / points * stood_for
            steps[replica] += stood_for
    return seconds, steps


def _baseline(session: Session, job: Job) -> tuple[Job, float] | None:
    """The newest succeeded 1-replica run of the same code at the same per-replica batch
    and devices with timed steps, and its examples/s; one with exactly the same
    hyperparameters otherwise (a sweep over `replicas`) comes first."""
    candidates = (
        session.execute(
            sa.select(Job)
            .where(
                Job.project_id == job.project_id,
                Job.replicas == 1,
                Job.status == JobStatus.SUCCEEDED,
                Job.id != job.id,
                Job.trainer.is_(None) if job.trainer is None else Job.trainer == job.trainer,
                Job.gpus_per_replica == job.gpus_per_replica,
            )
            .order_by(Job.id.desc())
            .limit(BASELINE_CANDIDATES)
        )
        .scalars()
        .all()
    )
    same = [
        c
        for c in candidates
        if c.command == job.command
        and c.bundle == job.bundle
        and _batch_size(c) == _batch_size(job)
        and _devices(c) == _devices(job)
    ]
    same.sort(key=lambda c: c.hyperparameters != job.hyperparameters)  # stable: newest first
    for candidate in same:
        rates = _examples_per_second(session, candidate)
        if rates:
            return candidate, rates[0]
    return None


def _batch_size(job: Job) -> int:
    value: Any = (job.hyperparameters or {}).get("batch_size", DEFAULT_BATCH_SIZE)
    return int(value)


def _devices(job: Job) -> int:
    """Devices one replica trains on in sync (`batch_size` is per device): all its GPUs
    under the mirrored strategies, or mirrored's logical CPUs; one under one_device."""
    if job.strategy == "one_device":
        return 1
    cpu_devices = (
        (job.distribution or {}).get("cpu_devices") if job.strategy == "mirrored" else None
    )
    return max(1, job.gpus_per_replica or cpu_devices or 1)


def _runs(job: Job) -> str:
    return job.trainer or " ".join(job.command or []) or "this job's code"
