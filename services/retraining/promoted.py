"""A schedule's promoted model, read from the registry: the version its alias points at
(services/registry/promotion.py registers each promotion there)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.exceptions import ModelNotFound, NoPromotedModel
from services.models import Job, ModelVersion, Replica, Schedule
from services.registry import aliases, versions
from services.registry.promotion import model_of
from services.retraining.read_schemas import PromotedModel
from services.storage import keys


def _promoted_version(session: Session, schedule: Schedule) -> tuple[str, str, ModelVersion]:
    """(model, alias, the version the schedule's alias points at) in the registry.

    Raises:
        NoPromotedModel: no such model or alias yet.
    """
    name, alias = model_of(schedule)
    try:
        model = versions.read_model(session=session, project_id=schedule.project_id, name=name)
        held = aliases.read_alias(session=session, model=model, alias=alias)
        return (
            name,
            alias,
            versions.read_version(session=session, model=model, version=held.version),
        )
    except ModelNotFound:
        raise NoPromotedModel(schedule.id) from None


def read_promoted_model(*, session: Session, schedule: Schedule) -> PromotedModel:
    """The promoted model: the version the schedule's alias points at in the registry (a
    rollback of the alias is followed), its job, metric value, and the chief's node and
    model path.

    Raises:
        NoPromotedModel: nothing is promoted yet.
    """
    name, alias, version = _promoted_version(session, schedule)
    job = session.get(Job, version.job_id) if version.job_id else None
    if job is None:
        raise NoPromotedModel(schedule.id)
    chief = session.execute(
        sa.select(Replica).where(
            Replica.job_id == job.id, Replica.attempt == job.attempt, Replica.index == 0
        )
    ).scalar_one_or_none()
    metric = schedule.promote_metric or ""
    return PromotedModel(
        schedule_id=schedule.id,
        model=name,
        alias=alias,
        version=version.version,
        job_id=job.id,
        metric=metric,
        mode=schedule.promote_mode,
        value=version.lineage.get("metrics", {}).get(metric),
        node_id=chief.node_id if chief else "",
        path=keys.model_prefix(job.id),
        artifact=version.artifact,
        download_url=f"/api/v1/jobs/{job.id}/artifacts/download?path=model",
        promoted_at=version.registered_at,
    )
