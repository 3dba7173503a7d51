"""API tokens: issued, registered from COHORT_BOOTSTRAP_TOKEN, authenticated, listed and
revoked. Tokens are stored as their SHA-256 (they are long random strings, not passwords);
the secret is answered once, when issued."""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
from collections.abc import Iterable

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from services.auth.schemas import TokenCreate, TokenCreated, TokenRead, TokenState
from services.auth.scopes import Scope
from services.auth.token_cache import process_cache
from services.exceptions import (
    InvalidTokenSpec,
    SelfRevocation,
    TokenNotFound,
    Unauthorized,
    WeakBootstrapToken,
)
from services.models import ApiToken, DashboardSession, Project, utcnow

DEFAULT_PROJECT = "default"
# A bootstrap token is an admin's secret chosen by a person: shorter than this, it could be
# guessed (the issued ones are 43 random URL-safe characters).
MIN_BOOTSTRAP_LENGTH = 32
# last_used_at is written at most this often per token.
LAST_USED_RESOLUTION = dt.timedelta(minutes=1)


def hash_token(token: str) -> str:
    """The stored form of a token or session id (SHA-256)."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_secret() -> str:
    """A fresh token: 32 random bytes, URL-safe."""
    return "coh_" + secrets.token_urlsafe(32)


def ensure_project(*, session: Session, name: str) -> Project:
    """The project called `name`, created if missing."""
    project = session.execute(sa.select(Project).where(Project.name == name)).scalar_one_or_none()
    if project is None:
        project = Project(name=name)
        session.add(project)
        session.flush()
    return project


def ensure_token(
    *,
    session: Session,
    token: str,
    scopes: Iterable[Scope | str],
    project_name: str = DEFAULT_PROJECT,
    name: str = "token",
    expires_at: dt.datetime | None = None,
    bootstrap: bool = False,
) -> ApiToken:
    """Register the secret `token` for a project, once (the row it already has is kept)."""
    digest = hash_token(token)
    row = session.execute(
        sa.select(ApiToken).where(ApiToken.token_hash == digest)
    ).scalar_one_or_none()
    if row is not None:
        return row
    project = ensure_project(session=session, name=project_name)
    row = ApiToken(
        project_id=project.id,
        name=name,
        token_hash=digest,
        scopes=sorted({Scope(s).value for s in scopes}),
        expires_at=expires_at,
        bootstrap=bootstrap,
    )
    try:
        # A savepoint: two api processes starting at once both register the bootstrap
        # token, and the one that loses the race must find the winner's row.
        with session.begin_nested():
            session.add(row)
    except IntegrityError:
        row = session.execute(sa.select(ApiToken).where(ApiToken.token_hash == digest)).scalar_one()
    return row


def create_token(
    *, session: Session, token_in: TokenCreate, now: dt.datetime | None = None
) -> TokenCreated:
    """Issue a new random token; the answer holds the only copy of its secret.

    Raises:
        InvalidTokenSpec: `expires_at` is not in the future (422, naming the field).
    """
    now = now or utcnow()
    expires_at = token_in.expires_at
    if token_in.expires_in is not None:
        expires_at = now + dt.timedelta(seconds=token_in.expires_in)
    elif expires_at is not None and expires_at <= now:
        raise InvalidTokenSpec(
            "expires_at",
            "is not in the future: give a later time, or expires_in (seconds from now)",
        )
    secret = new_secret()
    row = ensure_token(
        session=session,
        token=secret,
        scopes=token_in.scopes,
        project_name=token_in.project,
        name=token_in.name,
        expires_at=expires_at,
    )
    return TokenCreated(**to_read(row, now).model_dump(), token=secret)


def check_bootstrap_token(token: str) -> None:
    """Raise WeakBootstrapToken, in one line saying what to do, if `token` is too short."""
    if token and len(token) < MIN_BOOTSTRAP_LENGTH:
        raise WeakBootstrapToken(
            f"COHORT_BOOTSTRAP_TOKEN is {len(token)} characters; an admin token needs at "
            f"least {MIN_BOOTSTRAP_LENGTH}: make one with `openssl rand -hex 32`"
        )


def register_bootstrap(*, session: Session, token: str, now: dt.datetime | None = None) -> ApiToken:
    """Register COHORT_BOOTSTRAP_TOKEN as an admin token of project `default`, and revoke
    any earlier bootstrap token, so rotating the variable retires the old value.

    Raises:
        WeakBootstrapToken: shorter than MIN_BOOTSTRAP_LENGTH.
    """
    check_bootstrap_token(token)
    now = now or utcnow()
    row = ensure_token(
        session=session, token=token, scopes=[Scope.ADMIN], name="bootstrap", bootstrap=True
    )
    earlier = (
        session.execute(
            sa.select(ApiToken.id).where(
                ApiToken.bootstrap.is_(True), ApiToken.id != row.id, ApiToken.revoked_at.is_(None)
            )
        )
        .scalars()
        .all()
    )
    for token_id in earlier:
        _revoke(session=session, token_id=token_id, now=now)
    return row


def token_state(row: ApiToken, now: dt.datetime) -> TokenState:
    if row.revoked_at is not None:
        return "revoked"
    if row.expires_at is not None and row.expires_at <= now:
        return "expired"
    return "active"


def check_usable(row: ApiToken, now: dt.datetime) -> None:
    """Raise Unauthorized if the token has been revoked or has expired."""
    state = token_state(row, now)
    if state == "revoked":
        raise Unauthorized(
            f"token {row.name!r} was revoked at {row.revoked_at:%Y-%m-%d %H:%M} "
            "UTC: ask an admin for a new one"
        )
    if state == "expired":
        raise Unauthorized(
            f"token {row.name!r} expired at {row.expires_at:%Y-%m-%d %H:%M} "
            "UTC: ask an admin for a new one"
        )


def use_due(row: ApiToken, now: dt.datetime) -> bool:
    """Whether the token's use at `now` is to be recorded (record_use): its last use was
    recorded LAST_USED_RESOLUTION ago or more, or never."""
    return row.last_used_at is None or now - row.last_used_at >= LAST_USED_RESOLUTION


def record_use(*, session: Session, token_id: int, now: dt.datetime) -> bool:
    """Record the token's use at `now`, to the minute: nothing is written when a use less
    than LAST_USED_RESOLUTION earlier is recorded (by this process or another). Returns
    whether it wrote. The caller commits, in a transaction of its own: this write takes
    SQLite's one write lock, which the request's own transaction must not hold for the
    request's whole duration (an upload checked for seconds)."""
    due = sa.or_(
        ApiToken.last_used_at.is_(None), ApiToken.last_used_at <= now - LAST_USED_RESOLUTION
    )
    result = session.execute(
        sa.update(ApiToken).where(ApiToken.id == token_id, due).values(last_used_at=now)
    )
    return bool(getattr(result, "rowcount", 0))


def authenticate(
    *, session: Session, token: str | None, now: dt.datetime | None = None
) -> ApiToken:
    """The token row for a bearer token; only read (its use is recorded apart, by
    record_use).

    Raises:
        Unauthorized: no token, an unknown one, or one expired or revoked.
    """
    if not token:
        raise Unauthorized("missing bearer token: send 'Authorization: Bearer <token>'")
    now = now or utcnow()
    row = session.execute(
        sa.select(ApiToken).where(ApiToken.token_hash == hash_token(token))
    ).scalar_one_or_none()
    if row is None:
        raise Unauthorized("unknown token: check COHORT_TOKEN or ask an admin for a token")
    check_usable(row, now)
    return row


def to_read(row: ApiToken, now: dt.datetime | None = None) -> TokenRead:
    return TokenRead(
        id=row.id,
        project=row.project.name,
        name=row.name,
        scopes=row.scopes,
        state=token_state(row, now or utcnow()),
        bootstrap=row.bootstrap,
        created_at=row.created_at,
        expires_at=row.expires_at,
        revoked_at=row.revoked_at,
        last_used_at=row.last_used_at,
    )


def list_tokens(*, session: Session, project: str | None = None) -> list[ApiToken]:
    """Every token (of `project` if given), newest first."""
    query = sa.select(ApiToken).order_by(ApiToken.id.desc())
    if project is not None:
        query = query.join(Project).where(Project.name == project)
    return list(session.execute(query).scalars())


def revoke_token(
    *, session: Session, token_id: int, caller_id: int | None = None, now: dt.datetime | None = None
) -> ApiToken:
    """Revoke a token and every dashboard session of it, from the next request on; a token
    already revoked keeps its first revocation time. `caller_id`: the token asking, which
    may not revoke itself (an admin would lock itself out; another admin token can).

    Raises:
        TokenNotFound: no token has that id.
        SelfRevocation: the caller's own token.
    """
    row = session.get(ApiToken, token_id)
    if row is None:
        raise TokenNotFound(token_id)
    if token_id == caller_id:
        raise SelfRevocation(
            f"token {token_id} is the one making this request: revoke it with another "
            "admin token (cohort token create --scope admin), so that one admin remains"
        )
    _revoke(session=session, token_id=token_id, now=now or utcnow())
    session.refresh(row)
    return row


def _revoke(*, session: Session, token_id: int, now: dt.datetime) -> None:
    session.execute(
        sa.update(ApiToken)
        .where(ApiToken.id == token_id, ApiToken.revoked_at.is_(None))
        .values(revoked_at=now)
    )
    # This process's cached tokens at once; other processes' within their TTL.
    process_cache().forget()
    session.execute(
        sa.update(DashboardSession)
        .where(DashboardSession.token_id == token_id, DashboardSession.revoked_at.is_(None))
        .values(revoked_at=now)
    )
