"""Routes for jobs: submit, list, read, cancel, status history."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, BackgroundTasks, Header, Query, Response, status

from api.deps import (
    CurrentJob,
    RedisDep,
    SessionDep,
    SettingsDep,
    StoreDep,
    SubmitterDep,
    TokenDep,
    is_admin,
    scoped,
)
from api.json_body import CohortRoute
from api.openapi import errors
from api.params import NO_NUL, OptionalId, PageBefore
from services.auth.scopes import Scope
from services.jobs import store as jobs
from services.jobs.admission import Admitted, Submission
from services.jobs.schemas import JobCreate, JobEventRead, JobList, JobRead
from services.statuses import JobStatus
from services.telemetry.job_views import read_job_view, read_job_views
from services.wire.client import wake_scheduler

router = APIRouter(
    prefix="/jobs", tags=["jobs"], route_class=CohortRoute, dependencies=scoped(write=Scope.SUBMIT)
)


@router.post("", status_code=status.HTTP_201_CREATED, responses=errors(404, 409, 429))
def create_job(
    job_in: JobCreate,
    session: SessionDep,
    settings: SettingsDep,
    token: TokenDep,
    store: StoreDep,
    bus: RedisDep,
    submitter: SubmitterDep,
    background: BackgroundTasks,
    response: Response,
    idempotency_key: Annotated[str | None, Header(max_length=128)] = None,
) -> JobRead:
    """Submit a job; 201 means it is committed. A retried POST with the same
    Idempotency-Key returns the first job. Over the project's quota: 429 (queued jobs),
    403 (a priority above its ceiling, a gang larger than its running limits)."""
    requirements = jobs.check_submission(
        session=session, project_id=token.project_id, job_in=job_in, settings=settings, store=store
    )
    # The request's transaction holds nothing the admission needs (the token's last use
    # at most): it ends here, and its connection goes back to the pool while this
    # request waits for the batcher's commit.
    session.commit()
    admitted = submitter.submit(
        Submission(token.project_id, job_in, idempotency_key, requirements=tuple(requirements)),
        settings,
    )
    if not admitted.created:
        response.headers["Idempotent-Replayed"] = "true"
    # Runs after the response, hence after the commit: the scheduler never sees
    # a wake-up for a job it cannot read yet.
    background.add_task(wake_scheduler, bus)
    if admitted.created and not is_admin(token):
        return submitted_view(admitted)
    return read_job_view(
        session=session, job=admitted.job, with_progress=False, cluster_wide=is_admin(token)
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
