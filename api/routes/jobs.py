"""Routes for jobs: submit, list, read, cancel, status history."""

from __future__ import annotations

import asyncio
import weakref
from typing import Annotated

import anyio
import redis
from fastapi import APIRouter, BackgroundTasks, Header, Query, Response, status
from starlette.background import BackgroundTask

from api.deps import (
    CachedScopeRule,
    CachedTokenDep,
    CurrentJob,
    RedisDep,
    SessionDep,
    SessionsDep,
    SettingsDep,
    SubmitterDep,
    TokenDep,
    get_store,
    is_admin,
    scoped,
)
from api.json_body import CohortRoute
from api.openapi import errors
from api.params import NO_NUL, OptionalId, PageBefore
from services.auth.scopes import Scope
from services.db import Sessions
from services.jobs import store as jobs
from services.jobs.admission import Admitted, Submission
from services.jobs.schemas import JobCreate, JobEventRead, JobList, JobRead
from services.settings import Settings
from services.statuses import JobStatus
from services.telemetry.job_views import read_job_view, read_job_views
from services.wire.client import wake_scheduler

router = APIRouter(
    prefix="/jobs", tags=["jobs"], route_class=CohortRoute, dependencies=scoped(write=Scope.SUBMIT)
)


# Submissions have a router of their own: their token comes from the short cache
# (`CachedScopeRule`), on the event loop, where the other routes read it in SQL.
submissions = APIRouter(
    prefix="/jobs",
    tags=["jobs"],
    route_class=CohortRoute,
    dependencies=scoped(write=Scope.SUBMIT, rule=CachedScopeRule),
)


@submissions.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=JobRead,
    responses=errors(404, 409, 429),
)
async def create_job(
    job_in: JobCreate,
    settings: SettingsDep,
    token: CachedTokenDep,
    transaction: SessionsDep,
    bus: RedisDep,
    submitter: SubmitterDep,
    idempotency_key: Annotated[str | None, Header(max_length=128)] = None,
) -> Response:
    """Submit a job; 201 means it is committed. A retried POST with the same
    Idempotency-Key returns the first job. Over the project's quota: 429 (queued jobs),
    403 (a priority above its ceiling, a gang larger than its running limits)."""
    # Async end to end: a submission waits on the event loop for its group's commit
    # (services/jobs/submission_batcher.py) and takes a thread only for what reads.
    if job_in.bundle is None and not job_in.inputs:
        # Nothing to read (no bundle in SQL, no data in the store): on the event loop.
        requirements = jobs.check_submission(
            session=None, project_id=token.project_id, job_in=job_in, settings=settings
        )
    else:
        requirements = await anyio.to_thread.run_sync(
            _check, transaction, token.project_id, job_in, settings
        )
    admitted = await submitter.admit(
        Submission(token.project_id, job_in, idempotency_key, requirements=tuple(requirements)),
        settings,
    )
    if admitted.created and not is_admin(token):
        view = submitted_view(admitted)
    else:
        view = await anyio.to_thread.run_sync(_read_view, transaction, admitted, is_admin(token))
    return Response(
        view.model_dump_json(by_alias=True),
        status_code=status.HTTP_201_CREATED,
        headers=None if admitted.created else {"Idempotent-Replayed": "true"},
        media_type="application/json",
        # After the response, hence after the commit: the scheduler never sees a
        # wake-up for a job it cannot read yet.
        background=BackgroundTask(wake_once_more, bus),
    )


class _Wakes:
    """Per event loop (uvicorn runs one; the test client one per portal): whether a call
    of wake_scheduler is queued and has not begun, and the lock that lets one run at a
    time."""

    def __init__(self) -> None:
        self.queued = False
        self.running = asyncio.Lock()


_wakes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Wakes] = weakref.WeakKeyDictionary()


async def wake_once_more(bus: redis.Redis) -> None:
    """`wake_scheduler` after this request's commit, with at most one call running and
    one queued: a request that finds a call queued and not yet begun is covered by it
    (that call begins after this request's commit), so a burst of submissions pays a
    thread hop for a few of its requests, not one each (the hop cost the event loop more
    than the route's own work)."""
    wakes = _wakes.setdefault(asyncio.get_running_loop(), _Wakes())
    if wakes.queued:
        return
    wakes.queued = True
    async with wakes.running:  # those arriving meanwhile join the call queued here
        await anyio.to_thread.run_sync(_wake_now, wakes, bus)


def _wake_now(wakes: _Wakes, bus: redis.Redis) -> None:
    wakes.queued = False  # before the call: a request after this line queues another
    wake_scheduler(bus)


def _check(
    transaction: Sessions, project_id: int, job_in: JobCreate, settings: Settings
) -> list[str]:
    with transaction() as session:
        return jobs.check_submission(
            session=session,
            project_id=project_id,
            job_in=job_in,
            settings=settings,
            store=get_store(settings),
        )


def _read_view(transaction: Sessions, admitted: Admitted, cluster_wide: bool) -> JobRead:
    with transaction() as session:
        return read_job_view(
            session=session, job=admitted.job, with_progress=False, cluster_wide=cluster_wide
        )


def submitted_view(admitted: Admitted) -> JobRead:
    """A job just created, as `read_job_view` shows it, without reading it back: it has
    no replicas yet, and its place in its project's queue was counted at admission."""
    view = JobRead.model_validate(admitted.job)
    view.queue_position = admitted.queue_position
    return view


@router.get("")
def read_jobs(
    session: SessionDep,
    token: TokenDep,
    status_filter: Annotated[JobStatus | None, Query(alias="status")] = None,
    name: Annotated[str | None, Query(max_length=128, pattern=NO_NUL)] = None,
    before: PageBefore = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    schedule_id: Annotated[OptionalId, Query(description="jobs fired by this schedule")] = None,
    sweep_id: Annotated[OptionalId, Query(description="the trials of this sweep")] = None,
) -> JobList:
    """List the project's jobs, newest first; pass `next_cursor` back as `cursor`."""
    rows, next_before = jobs.list_jobs(
        session=session,
        project_id=token.project_id,
        status=status_filter,
        name=name,
        before=before,
        limit=limit,
        schedule_id=schedule_id,
        sweep_id=sweep_id,
    )
    return JobList(
        items=read_job_views(session=session, jobs=rows, cluster_wide=is_admin(token)),
        next_cursor=jobs.encode_cursor(next_before) if next_before else None,
    )


@router.get("/{job_id}")
def read_job(job: CurrentJob, session: SessionDep, token: TokenDep) -> JobRead:
    """A job: status, attempt, reason, where each replica runs, its place in the queue
    and its progress (the same view as the job's stream's `status` events)."""
    return read_job_view(session=session, job=job, cluster_wide=is_admin(token))


@router.post("/{job_id}/cancel", responses=errors(409))
def cancel_job(
    job: CurrentJob,
    session: SessionDep,
    bus: RedisDep,
    token: TokenDep,
    background: BackgroundTasks,
) -> JobRead:
    """Cancel a job; every replica on every node is stopped."""
    jobs.request_cancel(session=session, job=job)
    background.add_task(wake_scheduler, bus)
    return read_job_view(
        session=session, job=job, with_progress=False, cluster_wide=is_admin(token)
    )


@router.get("/{job_id}/events")
def read_job_events(job: CurrentJob, session: SessionDep) -> list[JobEventRead]:
    """The job's status history with reasons, oldest first."""
    return [JobEventRead.model_validate(e) for e in jobs.read_events(session=session, job=job)]
