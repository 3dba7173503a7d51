"""What every dashboard page is built with: one router factory, one renderer, one 404.

A page family is a module of api/routes/ (`job_pages.py`, `sweep_pages.py`, ...) listed in
PAGES of api/routes/dashboard.py, and every page in it is built the same way:

    router = page_router()

    def _thing_context(session, ...) -> dict[str, Any]:   # the data, read through services
        ...

    @router.get("/things/{thing_id}", response_model=None)
    def thing_page(request, session, viewer: Viewer, thing_id: DbId) -> Response:
        thing = ...  # None when the viewer's project has no such thing
        if thing is None:
            return not_found(request, viewer, "thing", thing_id)
        return render(request, "thing.html", viewer, **_thing_context(session, thing))

A page the browser refreshes live has a fragment beside it, `/partials/...`, rendering
its live part (`_thing_live.html`) from the same context; a missing thing there is a
bare 404, which the page's script shows.
"""

from __future__ import annotations

import datetime as dt
import shlex
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from api.deps import PageScopeRule, scoped
from services.auth.scopes import Scope, holds
from services.cluster import nodes
from services.jobs.store import decode_cursor
from services.models import ApiToken, Job
from services.statuses import JobStatus

PAGE_SIZE = 25
HERE = Path(__file__).resolve().parent.parent
templates = Jinja2Templates(directory=HERE / "templates")
CursorQuery = Annotated[str | None, Query(max_length=256)]


def page_router() -> APIRouter:
    """A router of dashboard pages: they need the `read` scope of a logged-in session
    (every action on them goes through REST v1, which checks its own); without a login,
    a page redirects to /login and a fragment answers 401 (api/routes/login.py)."""
    return APIRouter(
        tags=["dashboard"],
        include_in_schema=False,
        dependencies=scoped(write=Scope.SUBMIT, rule=PageScopeRule),
    )


def render(
    request: Request, name: str, viewer: ApiToken | None, code: int = 200, **context: Any
) -> HTMLResponse:
    """Template `name` with `context` and what every page shows (who is logged in)."""
    context.update(
        viewer=viewer,
        project=viewer.project.name if viewer else None,
        page=name.removesuffix(".html"),
        # A token without `submit` sees the submit and cancel controls disabled
        # (REST would refuse them anyway).
        submit_off="" if viewer and holds(viewer.scopes, Scope.SUBMIT) else "disabled",
    )
    return templates.TemplateResponse(request, name, context, status_code=code)


def not_found(request: Request, viewer: ApiToken, what: str, ident: int | str) -> HTMLResponse:
    """The 404 page: no `what` `ident` in the viewer's project (another project's is none)."""
    return render(request, "not_found.html", viewer, code=404, what=what, ident=ident)


def cursor_before(cursor: str | None) -> int | None:
    """Where a page of a list starts; a stale or hand-edited link starts from the newest."""
    try:
        return decode_cursor(cursor) if cursor else None
    except ValueError:
        return None


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
