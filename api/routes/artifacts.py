"""Routes for a job's artifacts: list them, download a file or a directory (.tar.gz)."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Header, Query
from fastapi.responses import StreamingResponse

from api.deps import CurrentJob, StoreDep, scoped
from services.auth.scopes import Scope
from services.jobs import artifacts
from services.jobs.file_schemas import ArtifactList, ArtifactRead
from services.storage.store import ArtifactStore

router = APIRouter(prefix="/jobs", tags=["artifacts"], dependencies=scoped(write=Scope.SUBMIT))


# What a download answers (a job's artifacts, a model version's files).
DOWNLOAD_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "content": {"application/octet-stream": {}, "application/gzip": {}},
        "description": "the file as stored, or the directory as a .tar.gz",
    },
    206: {
        "content": {"application/octet-stream": {}},
        "description": "the bytes of the file that Range asked for",
    },
    416: {"description": "Range starts past the end of the file"},
}
RangeHeader = Annotated[
    str | None,
    Header(
        alias="Range",
        description="of a file: bytes=N- (from byte N: what a copy of a growing file "
        "lacks), bytes=N-M or bytes=-N; a directory's .tar.gz is always whole",
    ),
]


@router.get("/{job_id}/artifacts")
def read_artifacts(
    job: CurrentJob,
    store: StoreDep,
    path: Annotated[
        str,
        Query(
            max_length=900,
            description="a directory of the job, e.g. tensorboard: only the files under "
            "it; empty: all of them",
        ),
    ] = "",
) -> ArtifactList:
    """The job's files in the artifact store: path (relative to the job), size, sha256."""
    return ArtifactList(
        items=[
            ArtifactRead.model_validate(a)
            for a in artifacts.list_artifacts(store=store, job_id=job.id, path=path)
        ]
    )


@router.get(
    "/{job_id}/artifacts/download",
    response_class=StreamingResponse,
    responses=DOWNLOAD_RESPONSES,
)
def download_artifact(
    job: CurrentJob,
    store: StoreDep,
    path: Annotated[
        str,
        Query(
            max_length=900,
            description="relative to the job, e.g. model (no `..` out of the "
            "job, no backslash or control character); empty: everything",
        ),
    ] = "",
    range_header: RangeHeader = None,
) -> StreamingResponse:
    """One file as it is (or the bytes Range asks for), or a directory as a .tar.gz built
    while it is sent."""
    target = artifacts.resolve_download(store=store, job_id=job.id, path=path)
    return send_download(store, target, range_header)


def send_download(
    store: ArtifactStore, target: artifacts.Download, range_header: str | None
) -> StreamingResponse:
    """The answer for a resolved download: a directory's .tar.gz, or a file (the bytes
    Range asks for, when it asks). A model version's files are sent the same way."""
    disposition = f"attachment; filename*=UTF-8''{quote(target.name)}"
    if target.prefix is not None:
        return StreamingResponse(
            artifacts.stream_tar_gz(store, target.prefix, target.base),
            media_type="application/gzip",
            headers={"Content-Disposition": disposition},
        )
    assert target.handle is not None and target.size is not None  # a file's
    try:
        asked = artifacts.byte_range(range_header, target.size)
    except BaseException:
        target.handle.close()
        raise
    start, end = asked or (0, target.size)
    headers = {
        "Content-Disposition": disposition,
        "Content-Length": str(end - start),
        "Accept-Ranges": "bytes",
    }
    if asked is not None:
        headers["Content-Range"] = f"bytes {start}-{end - 1}/{target.size}"
    return StreamingResponse(
        artifacts.stream_file(target.handle, end, start),
        status_code=206 if asked is not None else 200,
        media_type="application/octet-stream",
        headers=headers,
    )
