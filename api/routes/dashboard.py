"""The web dashboard: server-rendered pages (Jinja2, api/templates/), the HTML
fragments the pages' JavaScript refreshes live, login/logout (a server-side session
whose id the `cohort_session` cookie holds), and the bundled static assets
(api/static/, no network).

Pages read through the same services as REST v1 and show only the logged-in
token's project; anything of another project is a 404 page.
"""

from __future__ import annotations

import datetime as dt
import logging
import shlex
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, FastAPI, Form, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from api.deps import (
    SESSION_COOKIE,
    LoginRequired,
    PageScopeRule,
    RedisDep,
    SessionCookie,
    SessionDep,
    SettingsDep,
    StoreDep,
    Viewer,
    scoped,
)
from api.login_throttle import LoginThrottled, check_login_allowed, record_failed_login
from api.params import NO_NUL, DbId
from services.auth import sessions, tokens
from services.auth.scopes import Scope, holds
from services.cluster import nodes
from services.exceptions import JobNotFound, Unauthorized
from services.jobs import artifacts
from services.jobs import store as jobs
from services.jobs.schemas import JobCreate
from services.jobs.trainers import BUILTIN_TRAINERS
from services.models import ApiToken, Job
from services.statuses import TERMINAL_REPLICA_STATUSES, TERMINAL_STATUSES, JobStatus
from services.storage.store import ArtifactStore
from services.telemetry import scaling, summaries

PAGE_SIZE = 25
HERE = Path(__file__).resolve().parent.parent
templates = Jinja2Templates(directory=HERE / "templates")
# Pages need the `read` scope (every action on them goes through REST v1, which checks
# its own); logging in and out needs none.
router = APIRouter(
    tags=["dashboard"],
    include_in_schema=False,
    dependencies=scoped(write=Scope.SUBMIT, rule=PageScopeRule),
)
login_router = APIRouter(tags=["dashboard"], include_in_schema=False)
log = logging.getLogger(__name__)


def _age(value: dt.datetime | None, now: dt.datetime | None = None) -> str:
    """'42s', '5m', '3h 2m', '2d 4h': short enough for a table cell."""
    if value is None:
        return "—"
    seconds = max(0, int(((now or dt.datetime.now(dt.UTC)) - value).total_seconds()))
    if seconds < 60:
        return f"{seconds}s"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if hours < 1:
        return f"{minutes}m {seconds % 60}s" if minutes < 10 else f"{minutes}m"
    if days < 1:
        return f"{hours}h {minutes % 60}m"
    return f"{days}d {hours % 24}h"


def _duration(job: Job) -> str:
    if job.started_at is None:
        return "—"
    return _age(job.started_at, job.finished_at or dt.datetime.now(dt.UTC))


def _runs(job: Job) -> str:
    """What the job runs: its trainer, or its command as a shell would show it."""
    return shlex.join(job.command) if job.command else job.trainer or "—"


def _size(size: int) -> str:
    """'512 B', '3.4 KiB', '1.2 GiB'."""
    if size < 1024:
        return f"{size} B"
    value = float(size)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024:
            return f"{value:.1f} {unit}"
    return f"{value / 1024:.1f} TiB"


templates.env.filters["age"] = _age
templates.env.filters["duration"] = _duration
templates.env.filters["runs"] = _runs
templates.env.filters["size"] = _size
templates.env.filters["gpus"] = nodes.node_gpus
templates.env.globals["statuses"] = [s.value for s in JobStatus]


# Viewer (api/deps.py) is the logged-in token; without one a page redirects to
# /login?next=<this page>, and a fragment (/partials/…) answers 401, on which the page's
# JavaScript goes to the login form.


async def _login_required(request: Request, _: Exception) -> Response:
    if request.url.path.startswith("/partials/"):
        return Response(status_code=401)
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/login?next={quote(_safe_next(target))}", status_code=303)


def _safe_next(target: str | None) -> str:
    # Only a path on this site: '//evil.example' or 'https://…' would be an open redirect.
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def _render(
    request: Request, name: str, viewer: ApiToken | None, code: int = 200, **context: Any
) -> HTMLResponse:
    context.update(
        viewer=viewer,
        project=viewer.project.name if viewer else None,
        page=name.removesuffix(".html"),
        # A token without `submit` sees the submit and cancel controls disabled
        # (REST would refuse them anyway).
        submit_off="" if viewer and holds(viewer.scopes, Scope.SUBMIT) else "disabled",
    )
    return templates.TemplateResponse(request, name, context, status_code=code)


@login_router.get("/login")
def login_page(request: Request, next: str = "/") -> HTMLResponse:
    return _render(request, "login.html", None, next=_safe_next(next), error=None)


def _login_error(request: Request, next: str, code: int, message: str) -> HTMLResponse:
    return _render(
        request,
        "login.html",
        None,
        code=code,
        next=_safe_next(next),
        error=message.replace("COHORT_TOKEN", "the token"),
    )


@login_router.post("/login", response_model=None)
def login(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    bus: RedisDep,
    token: Annotated[str, Form(max_length=512)] = "",
    next: Annotated[str, Form(max_length=2048)] = "/",
) -> Response:
    """Check the token and open a session: the HttpOnly, SameSite=Strict cookie holds the
    session's id, never the token. Too many failures from one address: 429 until its
    window ends (api/login_throttle.py)."""
    address = request.client.host if request.client else "unknown"
    try:
        check_login_allowed(bus, settings, address)
        row = tokens.authenticate(session=session, token=token.strip())
    except LoginThrottled as exc:
        page = _login_error(request, next, 429, str(exc))
        page.headers["Retry-After"] = str(exc.retry_after)
        return page
    except Unauthorized as exc:
        record_failed_login(bus, settings, address)
        return _login_error(request, next, 401, str(exc))
    if not holds(row.scopes, Scope.READ):
        return _login_error(
            request,
            next,
            403,
            "this token lacks the 'read' scope the dashboard needs: log in with one that has it",
        )
    lifetime = dt.timedelta(seconds=settings.SESSION_LIFETIME)
    session_id, opened = sessions.create_session(session=session, token=row, lifetime=lifetime)
    max_age = int((opened.expires_at - opened.created_at).total_seconds())
    response = RedirectResponse(_safe_next(next), status_code=303)
    # Secure whenever the request came over HTTPS: behind a proxy uvicorn takes the scheme
    # from X-Forwarded-Proto, if the proxy's address is in FORWARDED_ALLOW_IPS.
    response.set_cookie(
        SESSION_COOKIE,
        session_id,
        max_age=max_age,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return response


@login_router.post("/logout")
def logout(session: SessionDep, session_id: SessionCookie = None) -> RedirectResponse:
    """End the session (the cookie's id is worthless from now on) and clear the cookie."""
    if session_id:
        sessions.end_session(session=session, session_id=session_id)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
    return response


def _jobs_context(
    session: SessionDep,
    viewer: ApiToken,
    status: JobStatus | str | None,
    q: str | None,
    cursor: str | None,
) -> dict[str, Any]:
    try:
        before = jobs.decode_cursor(cursor) if cursor else None
    except ValueError:
        before = None  # a stale or hand-edited link: start again from the newest
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
        before=before,
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
CursorQuery = Annotated[str | None, Query(max_length=256)]


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
    return _render(
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
    return _render(
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
        return _render(request, "not_found.html", viewer, code=404, job_id=job_id)
    # Resubmit sends this back as a JobCreate; a field the job row lacks keeps its default.
    spec = {
        key: getattr(job, key)
        for key in JobCreate.model_fields
        if getattr(job, key, None) is not None
    }
    return _render(request, "job.html", viewer, spec=spec, **_job_context(session, store, job))


@router.get("/partials/jobs/{job_id}", response_model=None)
def job_fragment(
    request: Request, session: SessionDep, store: StoreDep, viewer: Viewer, job_id: DbId
) -> Response:
    job = _job_or_none(session, viewer, job_id)
    if job is None:
        return Response(status_code=404)
    return _render(request, "_job_live.html", viewer, **_job_context(session, store, job))


@router.get("/cluster", response_model=None)
def cluster_page(request: Request, session: SessionDep, viewer: Viewer) -> Response:
    return _render(
        request,
        "cluster.html",
        viewer,
        nodes=nodes.read_nodes(session=session),
        loads=summaries.read_node_loads(session=session, project_id=viewer.project_id),
        queue=summaries.read_queue(session=session, project_id=viewer.project_id),
        now=dt.datetime.now(dt.UTC),
    )


@router.get("/schedules", response_model=None)
def schedules_page(request: Request, viewer: Viewer) -> Response:
    # Rendered in the browser from /api/v1/schedules, which may not exist yet:
    # the page then says so instead of showing anything made up.
    return _render(request, "schedules.html", viewer)


def install(app: FastAPI) -> None:
    """Serve the dashboard at `/` and its assets at `/static`."""
    app.add_exception_handler(LoginRequired, _login_required)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    app.include_router(login_router)
    app.include_router(router)
