"""A request body received into a spooled upload: the one way the api takes a large body."""

from __future__ import annotations

from fastapi import Request

from services.jobs.uploads import SpooledUpload


def takes_upload(method: str, path: str) -> bool:
    """Whether the request is an upload, whose body `receive_body` bounds by its own limit
    (COHORT_MAX_BUNDLE_BYTES, COHORT_MAX_DATA_BYTES) rather than COHORT_MAX_REQUEST_BYTES."""
    return method == "PUT" and path.startswith(("/api/v1/bundles/", "/api/v1/data/"))


async def receive_body(request: Request, upload: SpooledUpload) -> None:
    """Stream the body into `upload` (never the whole body in memory). A declared length
    over the limit is refused before a byte is read, a body that runs over it as soon as
    it does."""
    upload.check_declared_length(request.headers.get("content-length"))
    async for chunk in request.stream():
        upload.write(chunk)
