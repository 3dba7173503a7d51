"""Request dependencies: the SQL session, the settings, the caller's token, the current job."""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from typing import Annotated

import redis
from fastapi import Cookie, Depends, Header
from sqlalchemy.orm import Session

from api.params import DbId
from services import auth
from services.db import session_scope
from services.jobs import store as jobs
from services.models import ApiToken, Job
from services.settings import Settings, get_settings
from services.storage.store import ArtifactStore, open_store
from services.wire.client import get_redis


def get_db() -> Iterator[Session]:
    """One transaction per request: committed before the response is sent."""
    with session_scope() as session:
        yield session


# scope="function": the commit above runs before the response goes out, so a
# 201 is only ever sent for a job that is already committed.
SessionDep = Annotated[Session, Depends(get_db, scope="function")]
SettingsDep = Annotated[Settings, Depends(get_settings)]


def get_store(settings: SettingsDep) -> ArtifactStore:
    """The artifact store the settings name (one per store URL and endpoint)."""
    return _store(settings.ARTIFACT_URL or str(settings.data_dir / "artifacts"),
                  settings.ARTIFACT_ENDPOINT_URL)


@lru_cache(maxsize=4)
def _store(url: str, endpoint: str) -> ArtifactStore:  # noqa: ARG001 - part of the cache key
    return open_store(url)


StoreDep = Annotated[ArtifactStore, Depends(get_store)]


def get_bus() -> redis.Redis:
    return get_redis()


RedisDep = Annotated[redis.Redis, Depends(get_bus)]


def get_token(
    session: SessionDep, authorization: Annotated[str | None, Header()] = None,
    cohort_token: Annotated[str | None, Cookie()] = None,
) -> ApiToken:
    """The caller's token, from `Authorization: Bearer <token>` or the dashboard's
    `cohort_token` cookie (401 otherwise)."""
    token = None
    if authorization:
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() == "bearer":
            token = value.strip()
    # The dashboard's login cookie (HttpOnly, SameSite=Strict, so a cross-site
    # page cannot make the browser send it).
    if not token and cohort_token:
        token = cohort_token
    return auth.authenticate(session=session, token=token)


TokenDep = Annotated[ApiToken, Depends(get_token)]


def get_job(job_id: DbId, session: SessionDep, token: TokenDep) -> Job:
    """The job in the path, if the caller's project owns it (404 otherwise)."""
    return jobs.read_job(session=session, project_id=token.project_id, job_id=job_id)


CurrentJob = Annotated[Job, Depends(get_job)]
