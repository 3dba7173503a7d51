"""Tokens and dashboard sessions over time (a fake clock): expiry, revocation, last use,
the bootstrap token's rotation and minimum length."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.auth import sessions, tokens
from services.auth.schemas import TokenCreate
from services.auth.scopes import Scope, holds
from services.exceptions import Unauthorized, WeakBootstrapToken
from services.models import DashboardSession

T0 = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
HOUR = dt.timedelta(hours=1)
GOOD = "bootstrap-" + "x" * 30


def issue(session: Session, **fields: object) -> str:
    spec = TokenCreate.model_validate({"name": "t", "scopes": ["read"], **fields})
    return tokens.create_token(session=session, token_in=spec, now=T0).token


def test_admin_holds_every_scope_and_the_others_only_their_own() -> None:
    assert all(holds(["admin"], scope) for scope in Scope)
    assert holds(["read"], Scope.READ) and not holds(["read"], Scope.SUBMIT)
    assert not holds(["submit"], Scope.READ) and not holds(["schedules"], Scope.SUBMIT)
    assert not holds([], Scope.READ)


def test_a_token_works_until_it_expires(session: Session) -> None:
    secret = issue(session, expires_in=3600)
    assert tokens.authenticate(session=session, token=secret, now=T0 + 0.99 * HOUR)
    with pytest.raises(Unauthorized, match="expired at 2030-01-01 01:00 UTC"):
        tokens.authenticate(session=session, token=secret, now=T0 + HOUR)


def test_a_revoked_token_is_refused_from_then_on(session: Session) -> None:
    secret = issue(session)
    row = tokens.authenticate(session=session, token=secret, now=T0)
    tokens.revoke_token(session=session, token_id=row.id, now=T0 + HOUR)
    with pytest.raises(Unauthorized, match="revoked at 2030-01-01 01:00 UTC"):
        tokens.authenticate(session=session, token=secret, now=T0 + 2 * HOUR)
    assert tokens.to_read(row, T0 + 2 * HOUR).state == "revoked"


def test_unknown_and_missing_tokens_are_refused(session: Session) -> None:
    with pytest.raises(Unauthorized, match="unknown token"):
        tokens.authenticate(session=session, token="coh_nothing", now=T0)
    with pytest.raises(Unauthorized, match="missing bearer token"):
        tokens.authenticate(session=session, token="", now=T0)


def test_last_use_is_kept_to_the_minute_and_authenticating_writes_nothing(session: Session) -> None:
    secret = issue(session)
    row = tokens.authenticate(session=session, token=secret, now=T0)
    assert row.last_used_at is None and not session.dirty  # recorded apart, by record_use
    assert tokens.use_due(row, T0)
    assert tokens.record_use(session=session, token_id=row.id, now=T0)
    session.refresh(row)
    assert row.last_used_at == T0 and not tokens.use_due(row, T0 + dt.timedelta(seconds=59))
    assert not tokens.record_use(
        session=session, token_id=row.id, now=T0 + dt.timedelta(seconds=59)
    )
    session.refresh(row)
    assert row.last_used_at == T0
    assert tokens.record_use(session=session, token_id=row.id, now=T0 + dt.timedelta(seconds=60))
    session.refresh(row)
    assert row.last_used_at == T0 + dt.timedelta(seconds=60)


def test_a_session_ends_at_its_lifetime_logout_or_its_tokens_end(session: Session) -> None:
    secret = issue(session, expires_in=10 * 3600)
    row = tokens.authenticate(session=session, token=secret, now=T0)
    sid, opened = sessions.create_session(session=session, token=row, lifetime=HOUR, now=T0)
    assert sid != secret and opened.id_hash == tokens.hash_token(sid)
    assert (
        sessions.authenticate_session(session=session, session_id=sid, now=T0 + 0.5 * HOUR).id
        == row.id
    )
    with pytest.raises(Unauthorized, match="log in again"):
        sessions.authenticate_session(session=session, session_id=sid, now=T0 + HOUR)

    # Never past the token's own expiry.
    _, late = sessions.create_session(session=session, token=row, lifetime=100 * HOUR, now=T0)
    assert late.expires_at == T0 + 10 * HOUR

    sid, _ = sessions.create_session(session=session, token=row, lifetime=HOUR, now=T0)
    sessions.end_session(session=session, session_id=sid, now=T0)
    with pytest.raises(Unauthorized):
        sessions.authenticate_session(session=session, session_id=sid, now=T0)

    sid, _ = sessions.create_session(session=session, token=row, lifetime=HOUR, now=T0)
    tokens.revoke_token(session=session, token_id=row.id, now=T0)
    with pytest.raises(Unauthorized):
        sessions.authenticate_session(session=session, session_id=sid, now=T0)


def test_a_login_clears_the_tokens_ended_sessions(session: Session) -> None:
    row = tokens.authenticate(session=session, token=issue(session), now=T0)
    ended, _ = sessions.create_session(session=session, token=row, lifetime=HOUR, now=T0)
    sessions.end_session(session=session, session_id=ended, now=T0)
    sessions.create_session(session=session, token=row, lifetime=HOUR, now=T0)  # expires
    live, _ = sessions.create_session(session=session, token=row, lifetime=3 * HOUR, now=T0)
    sessions.create_session(session=session, token=row, lifetime=HOUR, now=T0 + 2 * HOUR)
    kept = (
        session.execute(
            sa.select(DashboardSession.id_hash).where(DashboardSession.token_id == row.id)
        )
        .scalars()
        .all()
    )
    assert len(kept) == 2 and tokens.hash_token(live) in kept


def test_a_new_bootstrap_token_revokes_the_previous_one(session: Session) -> None:
    first = tokens.register_bootstrap(session=session, token=GOOD + "1", now=T0)
    assert first.scopes == ["admin"] and first.bootstrap and first.project.name == "default"
    # The same value again (an api restart) keeps the same row, still valid.
    assert tokens.register_bootstrap(session=session, token=GOOD + "1", now=T0).id == first.id
    assert first.revoked_at is None
    second = tokens.register_bootstrap(session=session, token=GOOD + "2", now=T0 + HOUR)
    session.refresh(first)
    assert first.revoked_at == T0 + HOUR and second.revoked_at is None
    with pytest.raises(Unauthorized, match="revoked"):
        tokens.authenticate(session=session, token=GOOD + "1", now=T0 + 2 * HOUR)
    assert tokens.authenticate(session=session, token=GOOD + "2", now=T0 + 2 * HOUR)


@pytest.mark.parametrize("length", [1, 16, 31])
def test_a_short_bootstrap_token_is_refused(session: Session, length: int) -> None:
    with pytest.raises(WeakBootstrapToken, match=f"is {length} characters; .* at least 32"):
        tokens.register_bootstrap(session=session, token="t" * length, now=T0)
