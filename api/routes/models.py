"""Routes for the model registry: register a version, list and read models and versions,
move an alias and read its history. Reads need `read`; registering and moving aliases
`schedules` (or `admin`). Another project's models are 'not found'."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, status

from api.deps import SessionDep, StoreDep, TokenDep, scoped
from api.json_body import CohortRoute
from api.openapi import errors
from api.params import MAX_INT, shown
from services.auth.scopes import Scope
from services.models import ApiToken, RegisteredModel
from services.registry import aliases, versions, views
from services.registry.names import ALIAS_NAME, MODEL_NAME, actor
from services.registry.schemas import (
    AliasHistory,
    AliasMoveRead,
    AliasRead,
    AliasUpdate,
    ModelList,
    ModelRead,
    VersionCreate,
    VersionRead,
)

router = APIRouter(
    prefix="/models",
    tags=["models"],
    route_class=CohortRoute,
    dependencies=scoped(write=Scope.SCHEDULES),
)

ModelName = Annotated[
    str,
    Path(
        max_length=200,
        json_schema_extra=shown(f"^{MODEL_NAME.pattern}$"),
        examples=["digits"],
        description="the model's name",
    ),
]
AliasName = Annotated[
    str,
    Path(
        max_length=200,
        json_schema_extra=shown(f"^{ALIAS_NAME.pattern}$"),
        examples=["production"],
        description="the alias's name",
    ),
]
VersionNumber = Annotated[int, Path(ge=1, le=MAX_INT, examples=[1], description="1, 2, ...")]


def get_model(name: ModelName, session: SessionDep, token: TokenDep) -> RegisteredModel:
    """The model in the path, if the caller's project has it (404 otherwise)."""
    return versions.read_model(session=session, project_id=token.project_id, name=name)


CurrentModel = Annotated[RegisteredModel, Depends(get_model)]


def _by(token: ApiToken) -> str:
    return actor("token", token.name, token.id)


@router.post("/{name}/versions", status_code=status.HTTP_201_CREATED, responses=errors(404, 409))
def register_version(
    name: ModelName,
    version_in: VersionCreate,
    session: SessionDep,
    store: StoreDep,
    token: TokenDep,
) -> VersionRead:
    """Register a succeeded job's model as the model's next version (the model is made
    with its first version); its lineage is copied from the job."""
    version = versions.register_version(
        session=session,
        project_id=token.project_id,
        name=name,
        job_id=version_in.job_id,
        by=_by(token),
        store=store,
    )
    model = session.get(RegisteredModel, version.model_id)
    assert model is not None  # locked and flushed by register_version
    return views.one_version(session=session, model=model, version=version)


@router.get("")
def read_models(session: SessionDep, token: TokenDep) -> ModelList:
    """The project's models, by name, with their aliases."""
    return views.model_list(session=session, project_id=token.project_id)


@router.get("/{name}")
def read_model(model: CurrentModel, session: SessionDep) -> ModelRead:
    """A model: its versions (newest first, with their lineage) and its aliases."""
    return views.model_read(session=session, model=model)


@router.get("/{name}/versions/{version}")
def read_version(model: CurrentModel, version: VersionNumber, session: SessionDep) -> VersionRead:
    """One version: its job, lineage and the aliases on it."""
    row = versions.read_version(session=session, model=model, version=version)
    return views.one_version(session=session, model=model, version=row)


@router.get("/{name}/aliases/{alias}")
def read_alias(model: CurrentModel, alias: AliasName, session: SessionDep) -> AliasRead:
    """The version an alias points at."""
    return AliasRead.model_validate(aliases.read_alias(session=session, model=model, alias=alias))


@router.put("/{name}/aliases/{alias}", responses=errors(404))
def move_alias(
    model: CurrentModel,
    alias: AliasName,
    alias_in: AliasUpdate,
    session: SessionDep,
    token: TokenDep,
) -> AliasRead:
    """Point an alias at a version (made if new); the move is kept in its history with
    who made it and why. Moving `production` back to an older version is a rollback."""
    aliases.move_alias(
        session=session,
        model=model,
        alias=alias,
        version=alias_in.version,
        by=_by(token),
        reason=alias_in.reason,
    )
    return AliasRead.model_validate(aliases.read_alias(session=session, model=model, alias=alias))


@router.get("/{name}/aliases/{alias}/history")
def read_alias_history(
    model: CurrentModel,
    alias: AliasName,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> AliasHistory:
    """Every move of the alias, newest first: from and to which version, by whom, why."""
    row = aliases.read_alias(session=session, model=model, alias=alias)
    moves = aliases.alias_history(session=session, alias=row, limit=limit)
    return AliasHistory(
        model=model.name, alias=alias, items=[AliasMoveRead.model_validate(m) for m in moves]
    )
