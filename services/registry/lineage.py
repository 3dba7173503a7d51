"""A job's lineage, copied into a version when it is registered: the job's code (trainer,
command, image, bundle digest), its inputs with their content digests, hyperparameters,
final metrics, and the schedule or sweep it came from. A copy, not a reference: jobs are
deleted by their schedules' history limits, and a version must still say where it came
from."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.jobs.data_versions import content_digest
from services.models import Job, MetricPoint, Schedule
from services.registry.schemas import InputLineage, Lineage
from services.storage import keys
from services.storage.store import ArtifactStore


def final_metrics(*, session: Session, job: Job) -> dict[str, float]:
    """The last value of each metric (highest step) reported by replica 0 in the job's
    current attempt: what promotion compares (services/retraining/promotion.py)."""
    mine = (
        MetricPoint.job_id == job.id,
        MetricPoint.attempt == job.attempt,
        MetricPoint.replica == 0,
    )
    last = (
        sa.select(MetricPoint.name, sa.func.max(MetricPoint.step).label("step"))
        .where(*mine)
        .group_by(MetricPoint.name)
        .subquery()
    )
    rows = session.execute(
        sa.select(MetricPoint.name, MetricPoint.value)
        .join(last, sa.and_(last.c.name == MetricPoint.name, last.c.step == MetricPoint.step))
        .where(*mine)
        .order_by(MetricPoint.name)
    ).all()
    return {str(name): float(value) for name, value in rows}


def _inputs(session: Session, store: ArtifactStore, job: Job) -> list[InputLineage]:
    """Each input with the content digest of its data now (None: nothing is there any
    more). Registering follows the job's end, so this is the data the job read unless it
    was replaced in between; the data's own records say when (data_files.updated_at)."""
    found = []
    for name, path in sorted(job.inputs.items()):
        rel = str(path).removeprefix(f"{keys.DATA_PREFIX}/")
        version = content_digest(session=session, store=store, project_id=job.project_id, path=rel)
        digest = version.digest if version is not None else None
        found.append(InputLineage(name=name, path=str(path), digest=digest))
    return found


def lineage_of(*, session: Session, store: ArtifactStore, job: Job) -> Lineage:
    """What the registry keeps of `job` (its current attempt); `store`: where its inputs'
    data is, for their digests."""
    schedule = session.get(Schedule, job.schedule_id) if job.schedule_id else None
    return Lineage(
        job_id=job.id,
        job_name=job.name,
        attempt=job.attempt,
        trainer=job.trainer,
        command=job.command,
        image=job.image,
        bundle=job.bundle,
        inputs=_inputs(session, store, job),
        hyperparameters=dict(job.hyperparameters),
        metrics=final_metrics(session=session, job=job),
        schedule_id=job.schedule_id,
        schedule_name=schedule.name if schedule else None,
        sweep_id=job.sweep_id,
        trial_index=job.trial_index,
        finished_at=job.finished_at,
    )
