"""The dashboard's model registry pages: the project's models, and one model with its
aliases (and every move of each), its versions with their lineage and links to the jobs,
schedules and sweeps they came from. Built as every page is (api/routes/pages.py), from
the same views as REST `/api/v1/models`."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Request
from fastapi.responses import Response

from api.deps import SessionDep, Viewer
from api.routes.pages import not_found, page_router, render
from services.exceptions import ModelNotFound
from services.registry import aliases, versions, views
from services.registry.schemas import AliasMoveRead

router = page_router()


@router.get("/models", response_model=None)
def models_page(request: Request, session: SessionDep, viewer: Viewer) -> Response:
    listed = views.model_list(session=session, project_id=viewer.project_id)
    return render(request, "models.html", viewer, models=listed.items)


@router.get("/models/{name}", response_model=None)
def model_page(
    request: Request,
    session: SessionDep,
    viewer: Viewer,
    name: Annotated[str, Path(max_length=200)],
) -> Response:
    try:
        model = versions.read_model(session=session, project_id=viewer.project_id, name=name)
    except ModelNotFound:
        return not_found(request, viewer, "model", name)
    view = views.model_read(session=session, model=model)
    held = aliases.list_aliases(session=session, model_ids=[model.id])[model.id]
    history = {
        alias.name: [
            AliasMoveRead.model_validate(move)
            for move in aliases.alias_history(session=session, alias=alias, limit=50)
        ]
        for alias in held
    }
    return render(request, "model.html", viewer, model=view, history=history)
