"""Routes that check a spec without storing anything: `POST /api/v1/validate/job`.

Not under /jobs/: there a path's one segment is a job's id (GET /api/v1/jobs/{job_id}),
and `GET /jobs/validate` would answer that route's 422 where a method the path does not
take answers 405.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from api.deps import SessionDep, SettingsDep, StoreDep, TokenDep, scoped
from api.json_body import CohortRoute
from api.openapi import errors
from services.auth.scopes import Scope
from services.jobs import store as jobs
from services.jobs.quotas import check_template
from services.jobs.schemas import JobCreate
from services.jobs.spec import JobSpec

router = APIRouter(
    prefix="/validate",
    tags=["jobs"],
    route_class=CohortRoute,
    dependencies=scoped(write=Scope.SUBMIT),
)


@router.post("/job", responses=errors(404))
def validate_job(
    job_in: JobCreate,
    session: SessionDep,
    settings: SettingsDep,
    token: TokenDep,
    store: StoreDep,
    bundle_pending: Annotated[
        bool,
        Query(
            description="the spec's `bundle` is code not uploaded yet (a client checks the "
            "spec before it packs and uploads): its digest is not looked up"
        ),
    ] = False,
) -> JobSpec:
    """Check a job spec as POST /api/v1/jobs does, storing nothing: 200 with the spec as it
    would be stored, or the 422 (403 past the project's quota, 404 for inputs or a bundle
    it has not uploaded) the submission would get. How many jobs are queued is not
    checked: that can change before the submission."""
    jobs.check_submission(
        session=session,
        project_id=token.project_id,
        job_in=job_in,
        settings=settings,
        store=store,
        bundle_pending=bundle_pending,
    )
    check_template(
        session=session,
        project_id=token.project_id,
        job_in=job_in,
        settings=settings,
        field_prefix="",
    )
    return job_in
