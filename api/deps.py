"""Request dependencies: the SQL session, the settings, the caller's token (bearer or
dashboard session) and the scope check every route goes through, the current job."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from functools import lru_cache
from typing import Annotated, Any

import anyio
import redis
from fastapi import Cookie, Depends, Header, Request
from sqlalchemy.orm import Session

from api.credentials import Sessions, StreamCredential, bearer_token, caller, record_use
from api.params import DbId
from services.auth import sessions, tokens
from services.auth.scopes import Scope, check_scope, holds
from services.auth.token_cache import process_cache
from services.db import session_scope
from services.exceptions import Unauthorized
from services.jobs import store as jobs
from services.jobs.submission_batcher import SubmissionBatcher, process_batcher
from services.models import ApiToken, Job, utcnow
from services.settings import Settings, get_settings
from services.storage.store import ArtifactStore, open_store
from services.wire.client import get_redis

log = logging.getLogger("cohort.api")


def get_db() -> Iterator[Session]:
    """One transaction per request: committed before the response is sent."""
    with session_scope() as session:
        yield session


# scope="function": the commit above runs before the response goes out, so a
# 201 is only ever sent for a job that is already committed.
SessionDep = Annotated[Session, Depends(get_db, scope="function")]


async def get_sessions() -> Sessions:
    """Short transactions apart from the request's own, each committed as its block ends:
    for what must not wait for the request's commit or hold a session while the request
    lasts (an upload being checked). The api tests give savepoints instead."""
    return session_scope


SessionsDep = Annotated[Sessions, Depends(get_sessions)]


def commit_admission(session: Session) -> None:
    """Commit a quota admission (services/jobs/quotas.py) now, in the endpoint's thread.

    Admission holds the project's row lock until the commit. `get_db` commits only after
    the response is serialized, which needs a thread of the pool; a burst of submissions
    to one project can fill every thread with requests waiting for that very lock, and
    the holder would never get one. Committing here releases the lock without another
    thread. (The response is then read in a new transaction, which `get_db` commits.)
    """
    session.commit()


async def current_settings() -> Settings:
    """The settings. Async, as the other dependencies that wait for nothing: FastAPI runs a
    sync dependency in a pool thread, and a request's hops between the event loop and that
    pool cost more CPU than such a dependency's own work."""
    return get_settings()


SettingsDep = Annotated[Settings, Depends(current_settings)]


async def get_submitter() -> SubmissionBatcher:
    """Admits job submissions in grouped transactions (services/jobs/submission_batcher.py)."""
    return process_batcher()


SubmitterDep = Annotated[SubmissionBatcher, Depends(get_submitter)]


def get_store(settings: SettingsDep) -> ArtifactStore:
    """The artifact store the settings name (one per store URL and endpoint)."""
    return _store(
        settings.ARTIFACT_URL or str(settings.data_dir / "artifacts"),
        settings.ARTIFACT_ENDPOINT_URL,
    )


@lru_cache(maxsize=4)
def _store(url: str, endpoint: str) -> ArtifactStore:  # noqa: ARG001 - part of the cache key
    return open_store(url)


StoreDep = Annotated[ArtifactStore, Depends(get_store)]


async def get_bus() -> redis.Redis:
    return get_redis()  # a client; it connects on first use, in the thread that uses it


RedisDep = Annotated[redis.Redis, Depends(get_bus)]


SESSION_COOKIE = "cohort_session"  # the dashboard's login: a session id, never a token


AuthorizationHeader = Annotated[str | None, Header(alias="Authorization")]
SessionCookie = Annotated[str | None, Cookie(alias=SESSION_COOKIE)]


def get_token(
    session: SessionDep,
    transaction: SessionsDep,
    authorization: AuthorizationHeader = None,
    session_id: SessionCookie = None,
) -> ApiToken:
    """The caller's token, from `Authorization: Bearer <token>` or the dashboard's session
    cookie (401 otherwise)."""
    token = caller(session, authorization, session_id)
    record_use(transaction, token)
    return token


def get_upload_token(
    transaction: SessionsDep,
    authorization: AuthorizationHeader = None,
    session_id: SessionCookie = None,
) -> ApiToken:
    """The caller's token, read in a short transaction that ends before the endpoint runs.

    For uploads: their body streams in and is checked for seconds (a bundle), with no
    session, connection or lock of the database held meanwhile; they take short
    transactions of their own (`SessionsDep`) for what they read and record."""
    with transaction() as session:
        token = caller(session, authorization, session_id)
    record_use(transaction, token)
    return token


async def get_cached_token(
    transaction: SessionsDep,
    authorization: AuthorizationHeader = None,
    session_id: SessionCookie = None,
) -> ApiToken:
    """The caller's token, as `get_upload_token` reads it, but a bearer token found usable
    less than half a second ago is taken from the process's cache (services/auth/
    token_cache.py) on the event loop: no thread, no SQL. Revoked anywhere, it is refused
    within that half second; expired, at once."""
    bearer = bearer_token(authorization)
    if bearer is None:
        return await anyio.to_thread.run_sync(
            get_upload_token, transaction, authorization, session_id
        )
    token = process_cache().get(bearer)
    if token is None:
        return await _read_once(transaction, authorization, bearer)
    now = utcnow()
    tokens.check_usable(token, now)
    if tokens.use_due(token, now):  # once a minute: the write takes a thread
        await anyio.to_thread.run_sync(record_use, transaction, token)
    return token


# The bearer tokens being read for the cache, by event loop and digest: the requests of
# one token that miss together share one read, instead of each taking a thread and a
# connection at the moment its entry expires (under a burst: every client at once).
_reads: dict[tuple[int, str], asyncio.Task[ApiToken]] = {}


async def _read_once(transaction: Sessions, authorization: str | None, bearer: str) -> ApiToken:
    loop = asyncio.get_running_loop()
    key = (id(loop), tokens.hash_token(bearer))
    read = _reads.get(key)
    if read is None:
        # A task of its own: a sharer cancelled (its client gone) never cancels the read
        # the others wait for.
        read = _reads[key] = loop.create_task(_read(transaction, authorization, bearer))
        read.add_done_callback(lambda done: _read_done(key, done))
    return await asyncio.shield(read)


async def _read(transaction: Sessions, authorization: str | None, bearer: str) -> ApiToken:
    cache = process_cache()
    reading = cache.reading()
    token = await anyio.to_thread.run_sync(get_upload_token, transaction, authorization, None)
    cache.remember(bearer, token, reading)
    return token


def _read_done(key: tuple[int, str], done: asyncio.Task[ApiToken]) -> None:
    if _reads.get(key) is done:
        del _reads[key]
    if not done.cancelled():
        done.exception()  # retrieved, whether or not a sharer was left to see it


def get_stream_token(
    authorization: AuthorizationHeader = None, session_id: SessionCookie = None
) -> ApiToken:
    """The caller's token, read in a short session of its own.

    Streams last for hours, so they must not keep a request session's pooled connection;
    and one short session in one worker thread cannot deadlock the way several sync
    dependencies can when a burst of clients holds every thread and every connection.
    """
    with session_scope() as session:
        token = caller(session, authorization, session_id)
    record_use(session_scope, token)
    return token


def get_stream_credential(
    authorization: AuthorizationHeader = None, session_id: SessionCookie = None
) -> StreamCredential:
    return StreamCredential(authorization, session_id)


class LoginRequired(Exception):
    """A dashboard page without a live login session (the dashboard redirects to /login)."""


def get_viewer(
    session: SessionDep, transaction: SessionsDep, session_id: SessionCookie = None
) -> ApiToken:
    """The dashboard's logged-in token, from its session cookie alone."""
    if not session_id:
        raise LoginRequired
    try:
        token = sessions.authenticate_session(session=session, session_id=session_id)
    except Unauthorized:
        raise LoginRequired from None
    record_use(transaction, token)
    return token


TokenDep = Annotated[ApiToken, Depends(get_token)]
CachedTokenDep = Annotated[ApiToken, Depends(get_cached_token)]
UploadTokenDep = Annotated[ApiToken, Depends(get_upload_token)]
StreamTokenDep = Annotated[ApiToken, Depends(get_stream_token)]
StreamCredentialDep = Annotated[StreamCredential, Depends(get_stream_credential)]
Viewer = Annotated[ApiToken, Depends(get_viewer)]


# -- scopes: every route is checked here -----------------------------------------------
# A router is given its rule in one line, `APIRouter(..., dependencies=scoped(write=...))`:
# its GET and HEAD routes then need `read` and every other method the router's write
# scope, so a route added later cannot be left unchecked (tests/api/test_roles.py walks
# every route of the app). `require(scope)` on one route adds a stricter check.
READ_METHODS = frozenset({"GET", "HEAD"})


class ScopeRule:
    """Dependency: the caller's token, if it holds the scope the request's method needs
    (403 naming the scope otherwise)."""

    def __init__(self, *, read: Scope, write: Scope) -> None:
        self.read = read
        self.write = write

    def needed(self, method: str) -> Scope:
        return self.read if method.upper() in READ_METHODS else self.write

    def check(self, request: Request, token: ApiToken) -> ApiToken:
        check_scope(token, self.needed(request.method))
        return token

    async def __call__(self, request: Request, token: TokenDep) -> ApiToken:
        return self.check(request, token)  # no I/O: on the event loop (`current_settings`)


class StreamScopeRule(ScopeRule):
    """A ScopeRule for SSE streams: the token is read in a short session of its own."""

    async def __call__(self, request: Request, token: StreamTokenDep) -> ApiToken:
        return self.check(request, token)


class UploadScopeRule(ScopeRule):
    """A ScopeRule for uploads: the token is read in a short transaction of its own
    (`get_upload_token`), so no session stays open while the body comes in."""

    async def __call__(self, request: Request, token: UploadTokenDep) -> ApiToken:
        return self.check(request, token)


class CachedScopeRule(ScopeRule):
    """A ScopeRule for job submissions: the token from the short cache (`get_cached_token`)."""

    async def __call__(self, request: Request, token: CachedTokenDep) -> ApiToken:
        return self.check(request, token)


class PageScopeRule(ScopeRule):
    """A ScopeRule for dashboard pages: the login session's token, or a redirect to /login."""

    async def __call__(self, request: Request, token: Viewer) -> ApiToken:
        return self.check(request, token)


def scoped(
    *, write: Scope, read: Scope = Scope.READ, rule: type[ScopeRule] = ScopeRule
) -> list[Any]:
    """A router's `dependencies`: reads need `read`, every other method `write`."""
    return [Depends(rule(read=read, write=write))]


def require(scope: Scope) -> Any:
    """One route's extra requirement: `@router.get(..., dependencies=[require(ADMIN)])`."""
    return Depends(ScopeRule(read=scope, write=scope))


def is_admin(token: ApiToken) -> bool:
    """Whether the caller may see cluster-wide figures (e.g. a job's place in the whole
    queue), beyond its own project's."""
    return holds(token.scopes, Scope.ADMIN)


def get_job(job_id: DbId, session: SessionDep, token: TokenDep) -> Job:
    """The job in the path, if the caller's project owns it (404 otherwise)."""
    return jobs.read_job(session=session, project_id=token.project_id, job_id=job_id)


CurrentJob = Annotated[Job, Depends(get_job)]
