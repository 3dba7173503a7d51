"""Routes for projects' MLflow settings: read and set where a project's jobs become MLflow
runs (admin only)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path

from api.deps import SessionDep, SettingsDep, scoped
from api.json_body import CohortRoute
from services.auth.scopes import Scope
from services.tracking import targets
from services.tracking.schemas import TrackingRead, TrackingUpdate

router = APIRouter(
    prefix="/projects",
    tags=["mlflow"],
    route_class=CohortRoute,
    dependencies=scoped(read=Scope.ADMIN, write=Scope.ADMIN),
)

ProjectName = Annotated[str, Path(min_length=1, max_length=64, description="the project")]


@router.get("/{name}/mlflow")
def read_tracking(name: ProjectName, session: SessionDep, settings: SettingsDep) -> TrackingRead:
    """Where a project's jobs become MLflow runs: in force, its own, the cluster's."""
    return targets.read_tracking(session=session, project_name=name, settings=settings)


@router.put("/{name}/mlflow")
def update_tracking(
    name: ProjectName, tracking_in: TrackingUpdate, session: SessionDep, settings: SettingsDep
) -> TrackingRead:
    """Replace a project's own MLflow settings; a field left out or null takes the cluster's
    (`tracking_uri` "": none). Jobs submitted from then on are exported there."""
    return targets.set_tracking(
        session=session, project_name=name, tracking_in=tracking_in, settings=settings
    )
