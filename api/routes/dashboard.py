"""The web dashboard: server-rendered pages (Jinja2, api/templates/), the HTML
fragments the pages' JavaScript refreshes live, login/logout with the
`cohort_token` cookie, and the bundled static assets (api/static/, no network).

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

from fastapi import APIRouter, Depends, FastAPI, Form, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from api.deps import RedisDep, SessionDep, SettingsDep, StoreDep
from api.login_throttle import LoginThrottled, check_login_allowed, record_failed_login
from services import auth
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

COOKIE = "cohort_token"
COOKIE_MAX_AGE = 7 * 24 * 3600
PAGE_SIZE = 25
HERE = Path(__file__).resolve().parent.parent
templates = Jinja2Templates(directory=HERE / "templates")
router = APIRouter(tags=["dashboard"], include_in_schema=False)
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


class LoginRequired(Exception):
    """No valid login cookie (answered by `_login_required`)."""


def _viewer(request: Request, session: SessionDep) -> ApiToken:
    token = request.cookies.get(COOKIE)
    if not token:
        raise LoginRequired
    try:
        return auth.authenticate(session=session, token=token)
    except Unauthorized:
        raise LoginRequired from None


# The logged-in token; without one a page redirects to /login?next=<this page>, and a
# fragment (/partials/…) answers 401, on which the page's JavaScript goes to the login form.
Viewer = Annotated[ApiToken, Depends(_viewer)]


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


def _render(request: Request, name: str, viewer: ApiToken | None, code: int = 200,
            **context: Any) -> HTMLResponse:
    context.update(viewer=viewer, project=viewer.project.name if viewer else None,
                   page=name.removesuffix(".html"))
    return templates.TemplateResponse(request, name, context, status_code=code)


@router.get("/login")
def login_page(request: Request, next: str = "/") -> HTMLResponse:
    return _render(request, "login.html", None, next=_safe_next(next), error=None)


@router.post("/login", response_model=None)
def login(request: Request, session: SessionDep, settings: SettingsDep, bus: RedisDep,
          token: Annotated[str, Form(max_length=512)] = "",
          next: Annotated[str, Form(max_length=2048)] = "/") -> Response:
    """Check the token; keep it in an HttpOnly, SameSite=Strict cookie. Too many failures
    from one address: 429 until its window ends (api/login_throttle.py)."""
    token = token.strip()
    address = request.client.host if request.client else "unknown"
    try:
        check_login_allowed(bus, settings, address)
        auth.authenticate(session=session, token=token)
    except LoginThrottled as exc:
        page = _render(request, "login.html", None, code=429, next=_safe_next(next),
                       error=str(exc))
        page.headers["Retry-After"] = str(exc.retry_after)
        return page
    except Unauthorized as exc:
        record_failed_login(bus, settings, address)
        return _render(request, "login.html", None, code=401, next=_safe_next(next),
                       error=str(exc).replace("COHORT_TOKEN", "the token"))
    response = RedirectResponse(_safe_next(next), status_code=303)
    response.set_cookie(COOKIE, token, max_age=COOKIE_MAX_AGE, httponly=True,
                        samesite="strict", secure=request.url.scheme == "https", path="/")
    return response


@router.post("/logout")
def logout() -> RedirectResponse:
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return response


def _jobs_context(session: SessionDep, viewer: ApiToken, status: JobStatus | str | None,
                  q: str | None, cursor: str | None) -> dict[str, Any]:
    try:
        before = jobs.decode_cursor(cursor) if cursor else None
    except ValueError:
        before = None  # a stale or hand-edited link: start again from the newest
    if status and status not in JobStatus.__members__.values():
        raise RequestValidationError([{
            "loc": ("query", "status"), "type": "value_error",
            "msg": f"use one of {', '.join(JobStatus)}, or leave it empty for any"}])
    status = JobStatus(status) if status else None
    rows, next_before = jobs.list_jobs(session=session, project_id=viewer.project_id,
                                       status=status, name=q or None, before=before,
                                       limit=PAGE_SIZE)
    return {"jobs": rows, "status": status.value if status else "", "q": q or "",
            "cursor": cursor or "",
            "next_cursor": jobs.encode_cursor(next_before) if next_before else None,
            "last": summaries.read_last_metrics(session=session, jobs=rows),
            "job_nodes": summaries.read_job_nodes(session=session, jobs=rows)}


# The filter form sends `status=` for "any": an empty value is no filter, not an error.
StatusQuery = Annotated[str | None, Query(alias="status", max_length=32)]
TextQuery = Annotated[str | None, Query(max_length=128)]
CursorQuery = Annotated[str | None, Query(max_length=256)]


@router.get("/", response_model=None)
def jobs_page(request: Request, session: SessionDep, viewer: Viewer, status: StatusQuery = None,
              q: TextQuery = None, cursor: CursorQuery = None) -> Response:
    defaults = JobCreate().model_dump()
    return _render(request, "jobs.html", viewer, trainers=sorted(BUILTIN_TRAINERS),
                   defaults=defaults, **_jobs_context(session, viewer, status, q, cursor))


@router.get("/partials/jobs", response_model=None)
def jobs_rows(request: Request, session: SessionDep, viewer: Viewer, status: StatusQuery = None,
              q: TextQuery = None, cursor: CursorQuery = None) -> Response:
    return _render(request, "_job_rows.html", viewer,
                   **_jobs_context(session, viewer, status, q, cursor))


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
        r.status in TERMINAL_REPLICA_STATUSES for r in replicas)
    return {"job": job, "terminal": job.status in TERMINAL_STATUSES, "settled": settled,
            "replicas": replicas,
            "events": jobs.read_events(session=session, job=job),
            "artifacts": _artifacts(store, job),
            "scaling": scaling.read_scaling(session=session, job=job),
            "last": summaries.read_last_metrics(session=session, jobs=[job]).get(job.id, {})}


def _job_or_none(session: SessionDep, viewer: ApiToken, job_id: int) -> Job | None:
    try:
        return jobs.read_job(session=session, project_id=viewer.project_id, job_id=job_id)
    except JobNotFound:
        return None


@router.get("/jobs/{job_id}", response_model=None)
def job_page(request: Request, session: SessionDep, store: StoreDep, viewer: Viewer,
             job_id: int) -> Response:
    job = _job_or_none(session, viewer, job_id)
    if job is None:
        return _render(request, "not_found.html", viewer, code=404, job_id=job_id)
    # Resubmit sends this back as a JobCreate; a field the job row lacks keeps its default.
    spec = {key: getattr(job, key) for key in JobCreate.model_fields
            if getattr(job, key, None) is not None}
    return _render(request, "job.html", viewer, spec=spec, **_job_context(session, store, job))


@router.get("/partials/jobs/{job_id}", response_model=None)
def job_fragment(request: Request, session: SessionDep, store: StoreDep, viewer: Viewer,
                 job_id: int) -> Response:
    job = _job_or_none(session, viewer, job_id)
    if job is None:
        return Response(status_code=404)
    return _render(request, "_job_live.html", viewer, **_job_context(session, store, job))


@router.get("/cluster", response_model=None)
def cluster_page(request: Request, session: SessionDep, viewer: Viewer) -> Response:
    return _render(request, "cluster.html", viewer, nodes=nodes.read_nodes(session=session),
                   loads=summaries.read_node_loads(session=session,
                                                   project_id=viewer.project_id),
                   queue=summaries.read_queue(session=session, project_id=viewer.project_id),
                   now=dt.datetime.now(dt.UTC))


@router.get("/schedules", response_model=None)
def schedules_page(request: Request, viewer: Viewer) -> Response:
    # Rendered in the browser from /api/v1/schedules, which may not exist yet:
    # the page then says so instead of showing anything made up.
    return _render(request, "schedules.html", viewer)


def install(app: FastAPI) -> None:
    """Serve the dashboard at `/` and its assets at `/static`."""
    app.add_exception_handler(LoginRequired, _login_required)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    app.include_router(router)
