"""Register a version (the one way a version is made) and read models and versions.

Versions are numbered 1, 2, ... per model under the model's row lock (`latest_version`),
and a unique (model, version) constraint stands behind it. A version keeps its job: its
model files stay at the job's `jobs/<id>/model` in the artifact store rather than being
copied, so registering is one SQL transaction (nothing half-stored, nothing to copy in the
scheduler's pass, no second copy of every model). What would delete the job's row, its
schedule's history limits, skips registered jobs (services/retraining/promotion.py), and
the version's foreign key refuses any other deletion; nothing in Cohort deletes a job's
files from the store. Service functions only add and flush; the caller commits.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from services.exceptions import InvalidRegistryRequest, ModelNotFound, NotRegistrable
from services.models import Job, ModelVersion, RegisteredModel, utcnow
from services.registry.lineage import lineage_of
from services.registry.names import check_model_name
from services.statuses import JobStatus
from services.storage import keys
from services.storage.store import ArtifactStore
from services.webhooks import payloads
from services.webhooks.outbox import emit


def _model_query(project_id: int, name: str) -> sa.Select[RegisteredModel]:
    return sa.select(RegisteredModel).where(
        RegisteredModel.project_id == project_id, RegisteredModel.name == name
    )


def read_model(
    *, session: Session, project_id: int, name: str, lock: bool = False
) -> RegisteredModel:
    """A model of this project (another project's is 'not found'); `lock`: FOR UPDATE.

    Raises:
        ModelNotFound: no model of that name in the project.
    """
    query = _model_query(project_id, name)
    if lock:
        query = query.with_for_update().execution_options(populate_existing=True)
    model = session.execute(query).scalar_one_or_none()
    if model is None:
        raise ModelNotFound(f"model {name!r}")
    return model


def _locked_or_new_model(
    session: Session, project_id: int, name: str, now: dt.datetime
) -> RegisteredModel:
    """The model, locked, created first if it is new; two first registrations racing:
    one inserts, the other's insert fails on the unique name and it locks that row."""
    try:
        return read_model(session=session, project_id=project_id, name=name, lock=True)
    except ModelNotFound:
        pass
    try:
        with session.begin_nested():  # a savepoint: a lost race leaves the caller's work
            session.add(RegisteredModel(project_id=project_id, name=name, created_at=now))
            session.flush()
    except IntegrityError:
        pass
    return read_model(session=session, project_id=project_id, name=name, lock=True)


def registrable_job(
    *, session: Session, project_id: int, job_id: int, store: ArtifactStore | None
) -> Job:
    """The job, if its model can be registered: a succeeded job of the project that saved
    a model (looked for in `store` unless it is None).

    Raises:
        InvalidRegistryRequest: no such job in the project.
        NotRegistrable: the job did not succeed, or saved no model.
    """
    job = session.execute(
        sa.select(Job).where(Job.id == job_id, Job.project_id == project_id)
    ).scalar_one_or_none()
    if job is None:
        raise InvalidRegistryRequest(
            "job_id", f"no job {job_id} in this project; GET /api/v1/jobs lists its jobs"
        )
    if job.status is not JobStatus.SUCCEEDED:
        raise NotRegistrable(
            "job_id",
            f"job {job_id} is {job.status}: only a succeeded job's model can be registered; "
            "wait until it succeeds, or give another job",
        )
    if store is not None and not store.list(keys.model_prefix(job.id)):
        raise NotRegistrable(
            "job_id",
            f"job {job_id} saved no model (nothing under {keys.model_prefix(job.id)} in the "
            "artifact store): its trainer must write the model to $COHORT_MODEL_DIR",
        )
    return job


def register_version(
    *,
    session: Session,
    project_id: int,
    name: str,
    job_id: int,
    by: str,
    store: ArtifactStore,
    look_for_model: bool = True,
    now: dt.datetime | None = None,
) -> ModelVersion:
    """Register job `job_id`'s model as the next version of model `name` (made if new).

    `store`: the artifact store, where the job's model must be (unless not
    `look_for_model`) and its inputs' data is hashed for the lineage.

    Raises:
        InvalidRegistryRequest: a bad name, or no such job in the project.
        NotRegistrable: the job did not succeed, or saved no model.
    """
    now = now or utcnow()
    check_model_name(name)
    job = registrable_job(
        session=session,
        project_id=project_id,
        job_id=job_id,
        store=store if look_for_model else None,
    )
    model = _locked_or_new_model(session, project_id, name, now)
    model.latest_version += 1
    model.updated_at = now
    version = ModelVersion(
        model_id=model.id,
        version=model.latest_version,
        job_id=job.id,
        artifact=keys.model_prefix(job.id),
        lineage=lineage_of(session=session, store=store, job=job).model_dump(mode="json"),
        registered_by=by,
        registered_at=now,
    )
    session.add(version)
    session.flush()
    emit(
        session,
        project_id=project_id,
        event="model.version_registered",
        payload=payloads.version_registered_payload(model, version),
    )
    return version


def list_models(*, session: Session, project_id: int) -> list[RegisteredModel]:
    """The project's models, by name."""
    return list(
        session.execute(
            sa.select(RegisteredModel)
            .where(RegisteredModel.project_id == project_id)
            .order_by(RegisteredModel.name)
        ).scalars()
    )


def list_versions(*, session: Session, model: RegisteredModel) -> list[ModelVersion]:
    """The model's versions, newest first."""
    return list(
        session.execute(
            sa.select(ModelVersion)
            .where(ModelVersion.model_id == model.id)
            .order_by(ModelVersion.version.desc())
        ).scalars()
    )


def read_version(*, session: Session, model: RegisteredModel, version: int) -> ModelVersion:
    """Version `version` of the model.

    Raises:
        ModelNotFound: the model has no such version.
    """
    row = session.execute(
        sa.select(ModelVersion).where(
            ModelVersion.model_id == model.id, ModelVersion.version == version
        )
    ).scalar_one_or_none()
    if row is None:
        raise ModelNotFound(
            f"version {version} of model {model.name!r} (its versions: 1..{model.latest_version})"
        )
    return row


def registered_job_ids(*, session: Session, job_ids: list[int]) -> set[int]:
    """Which of `job_ids` a version keeps (their rows and model files must stay)."""
    if not job_ids:
        return set()
    rows = session.execute(
        sa.select(ModelVersion.job_id).where(ModelVersion.job_id.in_(job_ids))
    ).scalars()
    return {job_id for job_id in rows if job_id is not None}
