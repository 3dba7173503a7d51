"""The dashboard's cluster page (nodes, slots, the project's queue) and schedules page.
Built as every page is (api/routes/pages.py)."""

from __future__ import annotations

import datetime as dt

from fastapi import Request
from fastapi.responses import Response

from api.deps import SessionDep, Viewer
from api.routes.pages import page_router, render
from services.cluster import nodes
from services.telemetry import summaries

router = page_router()


@router.get("/cluster", response_model=None)
def cluster_page(request: Request, session: SessionDep, viewer: Viewer) -> Response:
    return render(
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
    return render(request, "schedules.html", viewer)
