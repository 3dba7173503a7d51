"""The API views of the registry: a model with its versions and aliases, a version with
its lineage and the aliases on it, an alias's history."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.models import Evaluation, ModelAlias, ModelVersion, RegisteredModel
from services.registry import aliases, versions
from services.registry.schemas import (
    AliasRead,
    EvaluationRead,
    Lineage,
    ModelList,
    ModelRead,
    ModelSummary,
    VersionRead,
)


def _evaluations(session: Session, job_ids: list[int]) -> dict[int, list[EvaluationRead]]:
    """The evaluations of each job's model (evaluate: on a schedule), oldest first."""
    found: dict[int, list[EvaluationRead]] = {}
    if job_ids:
        for row in session.execute(
            sa.select(Evaluation)
            .where(Evaluation.model_job_id.in_(job_ids))
            .order_by(Evaluation.created_at, Evaluation.id)
        ).scalars():
            found.setdefault(row.model_job_id or 0, []).append(EvaluationRead.model_validate(row))
    return found


def version_read(
    model: RegisteredModel,
    version: ModelVersion,
    on_it: list[ModelAlias],
    evaluations: dict[int, list[EvaluationRead]],
) -> VersionRead:
    """A version's view; `on_it`: the model's aliases (those on this version are named);
    `evaluations`: by job id (_evaluations)."""
    return VersionRead(
        model=model.name,
        version=version.version,
        job_id=version.job_id,
        artifact=version.artifact,
        lineage=Lineage.model_validate(version.lineage),
        aliases=[a.name for a in on_it if a.version == version.version],
        registered_by=version.registered_by,
        registered_at=version.registered_at,
        evaluations=evaluations.get(version.job_id or 0, []),
    )


def _summary(model: RegisteredModel, on_it: list[ModelAlias]) -> ModelSummary:
    return ModelSummary(
        name=model.name,
        latest_version=model.latest_version,
        aliases=[AliasRead.model_validate(a) for a in on_it],
        created_at=model.created_at,
        updated_at=model.updated_at,
    )


def model_list(*, session: Session, project_id: int) -> ModelList:
    """The project's models, by name, with their aliases."""
    models = versions.list_models(session=session, project_id=project_id)
    found = aliases.list_aliases(session=session, model_ids=[m.id for m in models])
    return ModelList(items=[_summary(m, found[m.id]) for m in models])


def model_read(*, session: Session, model: RegisteredModel) -> ModelRead:
    """A model with its versions (newest first) and aliases."""
    on_it = aliases.list_aliases(session=session, model_ids=[model.id])[model.id]
    rows = versions.list_versions(session=session, model=model)
    judged = _evaluations(session, [v.job_id for v in rows if v.job_id is not None])
    return ModelRead(
        **_summary(model, on_it).model_dump(),
        versions=[version_read(model, v, on_it, judged) for v in rows],
    )


def one_version(*, session: Session, model: RegisteredModel, version: ModelVersion) -> VersionRead:
    """A version's view, with the aliases on it now."""
    on_it = aliases.list_aliases(session=session, model_ids=[model.id])[model.id]
    judged = _evaluations(session, [version.job_id] if version.job_id is not None else [])
    return version_read(model, version, on_it, judged)
