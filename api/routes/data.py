"""Routes for a project's data in the artifact store: upload, list, delete."""

from __future__ import annotations

from fastapi import APIRouter, BackgroundTasks, Request, Response, status
from starlette.concurrency import run_in_threadpool

from api.credentials import Sessions
from api.deps import (
    RedisDep,
    SessionsDep,
    SettingsDep,
    StoreDep,
    UploadScopeRule,
    UploadTokenDep,
    scoped,
)
from api.params import DataPath
from api.uploads import receive_body
from services.auth.scopes import Scope
from services.jobs import data, data_versions
from services.jobs.file_schemas import DataList, DataRead
from services.storage.store import ArtifactStore
from services.wire.client import wake_scheduler

# The token is read in a short transaction of its own (UploadScopeRule): these routes use
# the database for nothing else, and an upload of gigabytes holds no session meanwhile.
router = APIRouter(
    prefix="/data", tags=["data"], dependencies=scoped(write=Scope.SUBMIT, rule=UploadScopeRule)
)


@router.get("")
def read_data(store: StoreDep, token: UploadTokenDep) -> DataList:
    """The project's data files: path and size. A job names one in `inputs` as
    `data/<path>`."""
    return DataList(
        items=[
            DataRead.model_validate(f)
            for f in data.list_data(store=store, project_id=token.project_id)
        ]
    )


@router.put(
    "/{path:path}",
    status_code=status.HTTP_201_CREATED,
    responses={
        200: {"description": "replaced the file that was at this path"},
        409: {"description": "the path is a directory of other data, or lies under a file"},
        413: {"description": "over COHORT_MAX_DATA_BYTES"},
        422: {"description": "the path is absolute, climbs out (`..`) or has control bytes"},
    },
)
async def put_data(
    path: DataPath,
    request: Request,
    response: Response,
    settings: SettingsDep,
    store: StoreDep,
    token: UploadTokenDep,
    sessions: SessionsDep,
    bus: RedisDep,
    background: BackgroundTasks,
) -> DataRead:
    """Upload a file (the raw bytes as the body) to `path` of the project's data; 201 when
    new, 200 when it replaced one."""
    # Refused before a byte of the body is read.
    await run_in_threadpool(data.check_free, store, token.project_id, path)
    with data.DataUpload(settings=settings) as upload:
        await receive_body(request, upload)
        stored, created = await run_in_threadpool(
            data.store_data, store=store, project_id=token.project_id, path=path, upload=upload
        )
    # Recorded once stored, in a short transaction of its own: what data-triggered
    # schedules and lineage read (services/jobs/data_versions.py).
    await run_in_threadpool(_record, sessions, store, token.project_id, path, stored.sha256)
    # A data-triggered schedule whose settle time is 0 fires in the pass this wakes,
    # not at the next periodic one.
    background.add_task(wake_scheduler, bus)
    if not created:
        response.status_code = status.HTTP_200_OK
    return DataRead.model_validate(stored)


@router.delete("/{path:path}", status_code=status.HTTP_204_NO_CONTENT)
def delete_data(
    path: DataPath, store: StoreDep, token: UploadTokenDep, sessions: SessionsDep
) -> Response:
    """Delete a file of the project's data."""
    data.delete_data(store=store, project_id=token.project_id, path=path)
    with sessions() as session:
        data_versions.record_deleted(session=session, project_id=token.project_id, path=path)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


def _record(
    sessions: Sessions, store: ArtifactStore, project_id: int, path: str, sha256: str | None
) -> None:
    with sessions() as session:
        data_versions.record_file(
            session=session, store=store, project_id=project_id, path=path, sha256=sha256
        )
