"""The dashboard's job pages: the jobs table with its submit form (`/`), one job
(`/jobs/{id}`), and the live fragments their scripts refresh. Built as every page is
(api/routes/pages.py), from the same services as REST `/api/v1/jobs`."""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response

from api.deps import SessionDep, StoreDep, Viewer
from api.params import NO_NUL, DbId
from api.routes.pages import (
    PAGE_SIZE,
    CursorQuery,
    cursor_before,
    not_found,
    page_router,
    render,
)
from services.exceptions import JobNotFound
from services.jobs import artifacts
from services.jobs import store as jobs
from services.jobs.schemas import JobCreate
from services.jobs.trainers import BUILTIN_TRAINERS
from services.models import ApiToken, Job
from services.statuses import TERMINAL_REPLICA_STATUSES, TERMINAL_STATUSES, JobStatus
from services.storage.store import ArtifactStore
from services.telemetry import hints, scaling, summaries

router = page_router()
log = logging.getLogger(__name__)


def _jobs_context(
    session: SessionDep,
    viewer: ApiToken,
    status: JobStatus | str | None,
    q: str | None,
    cursor: str | None,
) -> dict[str, Any]:
    if status and status not in JobStatus.__members__.values():
        raise RequestValidationError(
            [
                {
                    "loc": ("query", "status"),
                    "type": "value_error",
                    "msg": f"use one of {', '.join(JobStatus)}, or leave it empty for any",
                }
            ]
        )
    status = JobStatus(status) if status else None
    rows, next_before = jobs.list_jobs(
        session=session,
        project_id=viewer.project_id,
        status=status,
        name=q or None,
        before=cursor_before(cursor),
        limit=PAGE_SIZE,
    )
    return {
        "jobs": rows,
        "status": status.value if status else "",
        "q": q or "",
        "cursor": cursor or "",
        "next_cursor": jobs.encode_cursor(next_before) if next_before else None,
        "last": summaries.read_last_metrics(session=session, jobs=rows),
        "job_nodes": summaries.read_job_nodes(session=session, jobs=rows),
    }


# The filter form sends `status=` for "any": an empty value is no filter, not an error.
StatusQuery = Annotated[str | None, Query(alias="status", max_length=32)]
TextQuery = Annotated[str | None, Query(max_length=128, pattern=NO_NUL)]


@router.get("/", response_model=None)
def jobs_page(
    request: Request,
    session: SessionDep,
    viewer: Viewer,
    status: StatusQuery = None,
    q: TextQuery = None,
    cursor: CursorQuery = None,
) -> Response:
    defaults = JobCreate().model_dump()
    return render(
        request,
        "jobs.html",
        viewer,
        trainers=sorted(BUILTIN_TRAINERS),
        defaults=defaults,
        **_jobs_context(session, viewer, status, q, cursor),
    )


@router.get("/partials/jobs", response_model=None)
def jobs_rows(
    request: Request,
    session: SessionDep,
    viewer: Viewer,
    status: StatusQuery = None,
    q: TextQuery = None,
    cursor: CursorQuery = None,
) -> Response:
    return render(
        request, "_job_rows.html", viewer, **_jobs_context(session, viewer, status, q, cursor)
    )


def _artifacts(store: ArtifactStore, job: Job) -> dict[str, list[tuple[str, int]]] | None:
    """The job's artifacts by group, or None when the store does not answer: the rest of
    the page is still worth showing."""
    try:
        return artifacts.group_artifacts(store=store, job_id=job.id)
    except Exception:  # s3fs raises botocore's and aiohttp's errors, not only OSError
        log.warning("listing the artifacts of job %s failed", job.id, exc_info=True)
        return None


def _job_context(session: SessionDep, store: ArtifactStore, job: Job) -> dict[str, Any]:
    replicas = jobs.read_replicas(session=session, job=job)
    # Settled: nothing on this page will change again (replicas outlive a cancel briefly).
    settled = job.status in TERMINAL_STATUSES and all(
        r.status in TERMINAL_REPLICA_STATUSES for r in replicas
    )
    return {
        "job": job,
        "terminal": job.status in TERMINAL_STATUSES,
        "settled": settled,
        "replicas": replicas,
        "events": jobs.read_events(session=session, job=job),
        "artifacts": _artifacts(store, job),
        "scaling": scaling.read_scaling(session=session, job=job),
        "last": summaries.read_last_metrics(session=session, jobs=[job]).get(job.id, {}),
    }


def _job_or_none(session: SessionDep, viewer: ApiToken, job_id: int) -> Job | None:
    try:
        return jobs.read_job(session=session, project_id=viewer.project_id, job_id=job_id)
    except JobNotFound:
        return None


@router.get("/jobs/{job_id}", response_model=None)
def job_page(
    request: Request, session: SessionDep, store: StoreDep, viewer: Viewer, job_id: DbId
) -> Response:
    job = _job_or_none(session, viewer, job_id)
    if job is None:
        return not_found(request, viewer, "job", job_id)
    # Resubmit sends this back as a JobCreate; a field the job row lacks keeps its default.
    spec = {
        key: getattr(job, key)
        for key in JobCreate.model_fields
        if getattr(job, key, None) is not None
    }
    # Where the charts would be, while it has no points: how its code reports them.
    no_metrics = {
        "finished": hints.no_metrics_hint(job.id, job.trainer, finished=True),
        "running": hints.no_metrics_hint(job.id, job.trainer, finished=False),
    }
    return render(
        request,
        "job.html",
        viewer,
        spec=spec,
        no_metrics=no_metrics,
        **_job_context(session, store, job),
    )


@router.get("/partials/jobs/{job_id}", response_model=None)
def job_fragment(
    request: Request, session: SessionDep, store: StoreDep, viewer: Viewer, job_id: DbId
) -> Response:
    job = _job_or_none(session, viewer, job_id)
    if job is None:
        return Response(status_code=404)
    return render(request, "_job_live.html", viewer, **_job_context(session, store, job))
