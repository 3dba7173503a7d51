"""Routes for a model version's files: list them, download a file or all of them
(.tar.gz), sent as a job's artifacts are (Range on a file). Reads: the `read` scope."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import StreamingResponse

from api.deps import SessionDep, StoreDep, scoped
from api.routes.artifacts import DOWNLOAD_RESPONSES, RangeHeader, send_download
from api.routes.models import CurrentModel, VersionNumber
from services.auth.scopes import Scope
from services.jobs.file_schemas import ArtifactList, ArtifactRead
from services.registry import files, versions

router = APIRouter(prefix="/models", tags=["models"], dependencies=scoped(write=Scope.SCHEDULES))

FilePath = Annotated[
    str,
    Query(
        max_length=900,
        description="relative to the model directory, e.g. saved_model.pb (no `..` out of "
        "it); empty: all of it",
    ),
]


@router.get("/{name}/versions/{version}/files")
def read_version_files(
    model: CurrentModel,
    version: VersionNumber,
    session: SessionDep,
    store: StoreDep,
    path: FilePath = "",
) -> ArtifactList:
    """The version's files: path (relative to the model directory), size, sha256."""
    row = versions.read_version(session=session, model=model, version=version)
    return ArtifactList(
        items=[
            ArtifactRead.model_validate(f)
            for f in files.list_files(store=store, version=row, path=path)
        ]
    )


@router.get(
    "/{name}/versions/{version}/files/download",
    response_class=StreamingResponse,
    responses=DOWNLOAD_RESPONSES,
)
def download_version_files(
    model: CurrentModel,
    version: VersionNumber,
    session: SessionDep,
    store: StoreDep,
    path: FilePath = "",
    range_header: RangeHeader = None,
) -> StreamingResponse:
    """One file of the version (or the bytes Range asks for), or a directory of it as a
    .tar.gz whose entries unpack into the model directory."""
    row = versions.read_version(session=session, model=model, version=version)
    target = files.resolve_download(store=store, model=model.name, version=row, path=path)
    return send_download(store, target, range_header)
