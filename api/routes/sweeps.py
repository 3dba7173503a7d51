"""Routes for sweeps: create, list, read (with every trial), cancel."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, BackgroundTasks, Depends, Query, status

from api.deps import RedisDep, SessionDep, SettingsDep, TokenDep, scoped
from api.json_body import CohortRoute
from api.openapi import errors
from api.params import DbId, PageBefore
from services.auth.scopes import Scope
from services.jobs.store import encode_cursor
from services.models import Sweep
from services.statuses import SweepStatus
from services.sweeps import store as sweeps
from services.sweeps.schemas import SweepCreate, SweepList, SweepRead
from services.sweeps.views import to_list_read, to_read
from services.wire.client import wake_scheduler

router = APIRouter(
    prefix="/sweeps",
    tags=["sweeps"],
    route_class=CohortRoute,
    dependencies=scoped(write=Scope.SUBMIT),
)


def get_sweep(sweep_id: DbId, session: SessionDep, token: TokenDep) -> Sweep:
    """The sweep in the path, if the caller's project owns it."""
    return sweeps.read_sweep(session=session, project_id=token.project_id, sweep_id=sweep_id)


CurrentSweep = Annotated[Sweep, Depends(get_sweep)]


@router.post("", status_code=status.HTTP_201_CREATED, responses=errors(404, 429))
def create_sweep(
    sweep_in: SweepCreate,
    session: SessionDep,
    settings: SettingsDep,
    token: TokenDep,
    bus: RedisDep,
    background: BackgroundTasks,
) -> SweepRead:
    """Create a sweep: trials of a job template over a search space, at most
    `max_concurrent` at once; the scheduler creates each trial's job in its turn."""
    sweep = sweeps.create_sweep(
        session=session, project_id=token.project_id, sweep_in=sweep_in, settings=settings
    )
    background.add_task(wake_scheduler, bus)  # after the commit
    return to_read(session=session, sweep=sweep)


@router.get("")
def read_sweeps(
    session: SessionDep,
    token: TokenDep,
    status_filter: Annotated[SweepStatus | None, Query(alias="status")] = None,
    before: PageBefore = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> SweepList:
    """List the project's sweeps, newest first (without their trials); pass
    `next_cursor` back as `cursor`."""
    rows, next_before = sweeps.list_sweeps(
        session=session,
        project_id=token.project_id,
        status=status_filter,
        before=before,
        limit=limit,
    )
    return SweepList(
        items=to_list_read(session=session, sweeps=rows),
        next_cursor=encode_cursor(next_before) if next_before else None,
    )


@router.get("/{sweep_id}")
def read_sweep(sweep: CurrentSweep, session: SessionDep) -> SweepRead:
    """A sweep: every trial with its parameters, status and objective value; the best."""
    return to_read(session=session, sweep=sweep)


@router.post("/{sweep_id}/cancel", responses=errors(409))
def cancel_sweep(
    sweep_id: DbId, session: SessionDep, token: TokenDep, bus: RedisDep, background: BackgroundTasks
) -> SweepRead:
    """Cancel a sweep: its queued and running trials are cancelled, no new one starts."""
    # Locked: the scheduler pass must not create a trial of a sweep being cancelled.
    sweep = sweeps.read_sweep(
        session=session, project_id=token.project_id, sweep_id=sweep_id, lock=True
    )
    sweeps.cancel_sweep(session=session, sweep=sweep)
    background.add_task(wake_scheduler, bus)
    return to_read(session=session, sweep=sweep)
