"""Routes for projects' quotas: read and set a project's limits (admin only)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from api.deps import SessionDep, SettingsDep, scoped
from api.json_body import CohortRoute
from services.auth.scopes import Scope
from services.jobs import quotas
from services.jobs.quota_schemas import QuotaRead, QuotaUpdate

router = APIRouter(
    prefix="/projects",
    tags=["quotas"],
    route_class=CohortRoute,
    dependencies=scoped(read=Scope.ADMIN, write=Scope.ADMIN),
)

ProjectName = Annotated[str, Path(min_length=1, max_length=64, description="the project")]


@router.get("/{name}/quota")
def read_quota(name: ProjectName, session: SessionDep, settings: SettingsDep) -> QuotaRead:
    """A project's limits (in force, its own, the cluster's defaults) and what it uses."""
    return quotas.read_quota(session=session, project_name=name, settings=settings)


@router.put("/{name}/quota")
def update_quota(
    name: ProjectName, quota_in: QuotaUpdate, session: SessionDep, settings: SettingsDep
) -> QuotaRead:
    """Replace a project's own limits; a limit left out or null takes the cluster's
    default. What is queued or running stays; new limits apply to what comes next."""
    return quotas.set_quota(
        session=session, project_name=name, quota_in=quota_in, settings=settings
    )
