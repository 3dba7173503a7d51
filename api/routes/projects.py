"""Routes for a project's settings that only admins read and set: its quota and its MLflow
server. Each is a resource under `/projects/{name}/`, read and replaced whole."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from api.deps import SessionDep, SettingsDep, scoped
from api.json_body import CohortRoute
from services.auth.scopes import Scope
from services.jobs import quotas
from services.jobs.quota_schemas import QuotaRead, QuotaUpdate
from services.tracking import targets
from services.tracking.schemas import TrackingRead, TrackingUpdate

router = APIRouter(
    prefix="/projects",
    route_class=CohortRoute,
    dependencies=scoped(read=Scope.ADMIN, write=Scope.ADMIN),
)

ProjectName = Annotated[str, Path(min_length=1, max_length=64, description="the project")]


@router.get("/{name}/quota", tags=["quotas"])
def read_quota(name: ProjectName, session: SessionDep, settings: SettingsDep) -> QuotaRead:
    """A project's limits (in force, its own, the cluster's defaults) and what it uses."""
    return quotas.read_quota(session=session, project_name=name, settings=settings)


@router.put("/{name}/quota", tags=["quotas"])
def update_quota(
    name: ProjectName, quota_in: QuotaUpdate, session: SessionDep, settings: SettingsDep
) -> QuotaRead:
    """Replace a project's own limits; a limit left out or null takes the cluster's
    default. What is queued or running stays; new limits apply to what comes next."""
    return quotas.set_quota(
        session=session, project_name=name, quota_in=quota_in, settings=settings
    )


@router.get("/{name}/mlflow", tags=["mlflow"])
def read_tracking(name: ProjectName, session: SessionDep, settings: SettingsDep) -> TrackingRead:
    """Where a project's jobs become MLflow runs: in force, its own, the cluster's."""
    return targets.read_tracking(session=session, project_name=name, settings=settings)


@router.put("/{name}/mlflow", tags=["mlflow"])
def update_tracking(
    name: ProjectName, tracking_in: TrackingUpdate, session: SessionDep, settings: SettingsDep
) -> TrackingRead:
    """Replace a project's own MLflow settings; a field left out or null takes the cluster's
    (`tracking_uri` "": none). Jobs submitted from then on are exported there."""
    return targets.set_tracking(
        session=session, project_name=name, tracking_in=tracking_in, settings=settings
    )
