"""A request body received into a spooled upload: the one way the api takes a large body."""

from __future__ import annotations

from fastapi import Request

from services.jobs.uploads import SpooledUpload

# The `max_body_size` of a route that takes an upload: past the api's request bound
# (COHORT_MAX_REQUEST_BYTES), as the upload enforces its own (COHORT_MAX_BUNDLE_BYTES,
# COHORT_MAX_DATA_BYTES), read from the settings of each request.
UPLOAD_BODY_SIZE = 2**62


async def receive_body(request: Request, upload: SpooledUpload) -> None:
    """Stream the body into `upload` (never the whole body in memory). A declared length
    over the limit is refused before a byte is read, a body that runs over it as soon as
    it does."""
    upload.check_declared_length(request.headers.get("content-length"))
    async for chunk in request.stream():
        upload.write(chunk)
