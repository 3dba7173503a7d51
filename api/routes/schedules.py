"""Routes for retraining schedules: CRUD, pause/resume, run now, and the promoted model."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, BackgroundTasks, Depends, Query, Response, status
from sqlalchemy.orm import Session

from api.deps import RedisDep, SessionDep, SettingsDep, TokenDep, commit_admission, scoped
from api.json_body import CohortRoute
from api.openapi import errors
from api.params import DbId
from services.auth.scopes import Scope
from services.models import Schedule
from services.retraining import firing, promoted, schedules
from services.retraining.read_schemas import (
    PromotedModel,
    ScheduleList,
    ScheduleRead,
    ScheduleRunRead,
)
from services.retraining.schemas import ScheduleCreate, ScheduleUpdate
from services.wire.client import wake_scheduler

router = APIRouter(
    prefix="/schedules",
    tags=["schedules"],
    route_class=CohortRoute,
    dependencies=scoped(write=Scope.SCHEDULES),
)


def get_schedule(schedule_id: DbId, session: SessionDep, token: TokenDep) -> Schedule:
    """The schedule in the path, locked for the request, if the caller's project owns it."""
    # Locked so an update, a trigger and the scheduler's firing of the same
    # schedule do not interleave.
    return schedules.read_schedule(
        session=session, project_id=token.project_id, schedule_id=schedule_id, lock=True
    )


CurrentSchedule = Annotated[Schedule, Depends(get_schedule)]


def _read(session: Session, schedule: Schedule, runs: int = 20) -> ScheduleRead:
    return schedules.to_read(session=session, schedule=schedule, runs=runs)


@router.post("", status_code=status.HTTP_201_CREATED, responses=errors(404, 409, 429))
def create_schedule(
    schedule_in: ScheduleCreate, session: SessionDep, settings: SettingsDep, token: TokenDep
) -> ScheduleRead:
    """Create a schedule: a job template fired on a cron expression or a fixed interval."""
    schedule = schedules.create_schedule(
        session=session, project_id=token.project_id, schedule_in=schedule_in, settings=settings
    )
    commit_admission(session)
    return _read(session, schedule)


@router.get("")
def read_schedules(session: SessionDep, token: TokenDep) -> ScheduleList:
    """List the project's schedules, by name, each with its last few runs."""
    return ScheduleList(
        items=[
            _read(session, s, runs=3)
            for s in schedules.list_schedules(session=session, project_id=token.project_id)
        ]
    )


@router.get("/{schedule_id}")
def read_schedule(
    schedule: CurrentSchedule, session: SessionDep, runs: Annotated[int, Query(ge=0, le=500)] = 20
) -> ScheduleRead:
    """A schedule: next fire time, last outcome, and its recent runs with their decisions."""
    return _read(session, schedule, runs)


@router.patch("/{schedule_id}", responses=errors(409))
def update_schedule(
    schedule: CurrentSchedule,
    schedule_in: ScheduleUpdate,
    session: SessionDep,
    settings: SettingsDep,
) -> ScheduleRead:
    """Change a schedule; the fields given replace the stored ones."""
    schedules.update_schedule(
        session=session, schedule=schedule, schedule_in=schedule_in, settings=settings
    )
    return _read(session, schedule)


@router.post("/{schedule_id}/pause")
def pause_schedule(schedule: CurrentSchedule, session: SessionDep) -> ScheduleRead:
    """Stop firing until resumed; runs due meanwhile are not made up."""
    schedules.pause_schedule(session=session, schedule=schedule)
    return _read(session, schedule)


@router.post("/{schedule_id}/resume")
def resume_schedule(schedule: CurrentSchedule, session: SessionDep) -> ScheduleRead:
    """Fire again from the next fire time after now."""
    schedules.resume_schedule(session=session, schedule=schedule)
    return _read(session, schedule)


@router.delete("/{schedule_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_schedule(schedule: CurrentSchedule, session: SessionDep) -> Response:
    """Delete a schedule and its run records; the jobs it fired stay."""
    schedules.delete_schedule(session=session, schedule=schedule)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/{schedule_id}/trigger", status_code=status.HTTP_201_CREATED, responses=errors(409, 429)
)
def trigger_schedule(
    schedule: CurrentSchedule,
    session: SessionDep,
    settings: SettingsDep,
    bus: RedisDep,
    background: BackgroundTasks,
) -> ScheduleRunRead:
    """Run the schedule now, under its concurrency policy; the run says what happened."""
    run = firing.trigger_schedule(session=session, settings=settings, schedule=schedule)
    assert run is not None  # a fresh fire time: nothing else can have recorded it
    commit_admission(session)
    background.add_task(wake_scheduler, bus)  # after the commit
    return ScheduleRunRead.model_validate(run)


@router.get("/{schedule_id}/model")
def read_promoted_model(schedule: CurrentSchedule, session: SessionDep) -> PromotedModel:
    """The promoted model: its job, metric value, and the chief's node and model path."""
    return promoted.read_promoted_model(session=session, schedule=schedule)
