"""Routes for code bundles: ask whether the project has one, upload one."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request, Response, status
from starlette.concurrency import run_in_threadpool

from api.deps import SessionDep, SessionsDep, SettingsDep, UploadScopeRule, UploadTokenDep, scoped
from api.params import Digest
from api.uploads import receive_body
from services.auth.scopes import Scope
from services.exceptions import BundleNotFound
from services.jobs import bundles
from services.jobs.file_schemas import BundleRead

# HEAD is part of uploading (`cohort job submit --code` asks before it sends), so both need
# `submit`: a CI token that only submits can still ship its code. The token is read in a
# short transaction of its own (UploadScopeRule): an upload holds no session while its
# body comes in and is checked.
router = APIRouter(
    prefix="/bundles",
    tags=["bundles"],
    dependencies=scoped(read=Scope.SUBMIT, write=Scope.SUBMIT, rule=UploadScopeRule),
)

# Bundles checked at once by this process. A check takes a worker thread for seconds (one
# that unpacks to a gigabyte); the other requests' dependencies need those threads (40), so
# a tenant sending many bundles at once waits here, on the event loop, holding none.
CHECKS_AT_ONCE = 2
_checks = asyncio.Semaphore(CHECKS_AT_ONCE)


@router.head("/{digest}")
def head_bundle(digest: Digest, session: SessionDep, token: UploadTokenDep) -> Response:
    """200 if this project has uploaded the bundle, 404 otherwise (then PUT it)."""
    if bundles.read_bundle(session=session, project_id=token.project_id, digest=digest) is None:
        raise BundleNotFound(bundles.normalise_digest(digest))
    return Response(status_code=status.HTTP_200_OK)


@router.put(
    "/{digest}",
    status_code=status.HTTP_201_CREATED,
    responses={
        200: {"description": "the project already had this bundle; nothing new was stored"},
        413: {"description": "over COHORT_MAX_BUNDLE_BYTES"},
        422: {"description": "the digest does not match the body, or the archive is refused"},
    },
)
async def put_bundle(
    digest: Digest,
    request: Request,
    response: Response,
    transaction: SessionsDep,
    settings: SettingsDep,
    token: UploadTokenDep,
) -> BundleRead:
    """Upload a bundle: the raw .tar.gz as the body, its sha256 in the path. 201 when
    stored for this project now."""
    with bundles.BundleUpload(digest=digest, settings=settings) as upload:
        await receive_body(request, upload)
        # In a worker thread, with no session open while the archive is checked: other
        # requests are served meanwhile, and no database lock waits on the check.
        async with _checks:
            bundle, created = await run_in_threadpool(
                bundles.accept_bundle,
                transaction=transaction,
                project_id=token.project_id,
                upload=upload,
                settings=settings,
            )
    if not created:
        response.status_code = status.HTTP_200_OK
    return BundleRead.model_validate(bundle)
