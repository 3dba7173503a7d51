"""The dashboard's login sessions: the cookie holds a random session id, never the token;
the id is stored as its SHA-256 with an expiry. A session stands for its token until it
expires, its user logs out, or its token is revoked or expires."""

from __future__ import annotations

import datetime as dt
import secrets

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.auth import tokens
from services.exceptions import Unauthorized
from services.models import ApiToken, DashboardSession, utcnow


def create_session(
    *, session: Session, token: ApiToken, lifetime: dt.timedelta, now: dt.datetime | None = None
) -> tuple[str, DashboardSession]:
    """Open a session for `token`, ending after `lifetime` or when the token expires,
    whichever is first; returns the only copy of its id, and its row."""
    now = now or utcnow()
    # The token's ended sessions go now: nothing reads them again, and the table stays
    # the size of the live logins.
    session.execute(
        sa.delete(DashboardSession).where(
            DashboardSession.token_id == token.id,
            sa.or_(DashboardSession.expires_at <= now, DashboardSession.revoked_at.is_not(None)),
        )
    )
    expires_at = now + lifetime
    if token.expires_at is not None:
        expires_at = min(expires_at, token.expires_at)
    session_id = secrets.token_urlsafe(32)
    row = DashboardSession(
        token_id=token.id,
        id_hash=tokens.hash_token(session_id),
        created_at=now,
        expires_at=expires_at,
    )
    session.add(row)
    session.flush()
    return session_id, row


def authenticate_session(
    *, session: Session, session_id: str, now: dt.datetime | None = None
) -> ApiToken:
    """The token a live session stands for.

    Raises:
        Unauthorized: no such session, or it has ended (expired, logged out, its token
            revoked or expired).
    """
    now = now or utcnow()
    row = session.execute(
        sa.select(DashboardSession).where(DashboardSession.id_hash == tokens.hash_token(session_id))
    ).scalar_one_or_none()
    if row is None or row.revoked_at is not None or row.expires_at <= now:
        raise Unauthorized("no dashboard session: log in again at /login")
    tokens.check_usable(row.token, now)
    return row.token


def end_session(*, session: Session, session_id: str, now: dt.datetime | None = None) -> None:
    """Log a session out (nothing happens for an unknown or ended one)."""
    session.execute(
        sa.update(DashboardSession)
        .where(
            DashboardSession.id_hash == tokens.hash_token(session_id),
            DashboardSession.revoked_at.is_(None),
        )
        .values(revoked_at=now or utcnow())
    )
