"""Who is calling: the token of an `Authorization: Bearer` header or of the dashboard's
session cookie, the record of a token's use, and an open stream's credential asked again
while the stream lasts. The request dependencies built on these are in api/deps.py."""

from __future__ import annotations

import logging
import threading
import time

from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from services.auth import sessions, tokens
from services.db import Sessions, database_unreachable, session_scope
from services.exceptions import Unauthorized
from services.models import ApiToken, utcnow

log = logging.getLogger("cohort.api")

# Short transactions apart from the request's own (`SessionsDep` of api/deps.py).


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header, or None when the header is
    absent, of another scheme or empty: then the cookie, if any, authenticates the
    request. The one reading of the header, shared by authentication and the cross-site
    check (api/csrf.py), so the check never skips a request the cookie authenticates."""
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return None


def caller(session: Session, authorization: str | None, session_id: str | None) -> ApiToken:
    """The token of `Authorization: Bearer <token>`, else of the dashboard session whose
    id the cookie holds (Unauthorized otherwise)."""
    bearer = bearer_token(authorization)
    if bearer is not None:
        return tokens.authenticate(session=session, token=bearer)
    # The cookie is HttpOnly and SameSite=Strict, so a cross-site page cannot make the
    # browser send it.
    if session_id:
        return sessions.authenticate_session(session=session, session_id=session_id)
    return tokens.authenticate(session=session, token=None)


def record_use(transaction: Sessions, token: ApiToken) -> None:
    """Record the token's use, at most once a minute, in a short transaction of its own.

    Never in the request's transaction: on SQLite that write takes the database's one
    write lock, and the request would hold it until its commit, however long it lasts
    (an upload checked for seconds held every other project's writes back). A use that
    cannot be recorded (the database locked or down) does not refuse the request: the
    next one records it."""
    now = utcnow()
    if not tokens.use_due(token, now):
        return
    try:
        with transaction() as session:
            tokens.record_use(session=session, token_id=token.id, now=now)
    except Exception as exc:
        if not database_unreachable(exc):
            raise
        log.warning("could not record the use of token %s: %s", token.id, exc)
        return
    # As written, without marking the row changed in the request's session.
    set_committed_value(token, "last_used_at", now)


class StreamCredential:
    """What an open stream was let in with, asked again while it lasts: a stream outlives
    its request by hours, and a token revoked or expired, or a dashboard session logged
    out, since must end it (api/routes/streams.py). The answer is shared by every stream
    of one credential in this process for ANSWER_SECONDS: one token may hold many streams
    (COHORT_MAX_STREAMS_PER_TOKEN), which should not each ask the database."""

    ANSWER_SECONDS = 2.0
    _answers: dict[tuple[str | None, ...], tuple[float, bool]] = {}
    _lock = threading.Lock()

    def __init__(self, authorization: str | None, session_id: str | None) -> None:
        self._credential = (authorization, session_id)
        # The shared answers are kept under digests, not the secrets themselves.
        self._key = tuple(
            None if part is None else tokens.hash_token(part) for part in self._credential
        )

    def recent_answer(self) -> bool | None:
        """The answer given for this credential less than ANSWER_SECONDS ago, if any: asked
        on the event loop, so most checks of a busy process need no worker thread."""
        with self._lock:
            answer = self._answers.get(self._key)
        if answer is not None and time.monotonic() - answer[0] < self.ANSWER_SECONDS:
            return answer[1]
        return None

    def still_valid(self) -> bool:
        """False once the credential no longer lets a request in (asked of the database
        unless answered recently). A database that does not answer is no answer: nothing
        can be revoked while it is down either."""
        recent = self.recent_answer()
        if recent is not None:
            return recent
        now = time.monotonic()
        try:
            with session_scope() as session:
                token = caller(session, *self._credential)
            record_use(session_scope, token)
            valid = True
        except Unauthorized:
            valid = False
        except Exception:  # noqa: BLE001 - asked again at the next check
            log.warning("could not check an open stream's credential", exc_info=True)
            return True
        with self._lock:
            if len(self._answers) > 10_000:  # old answers are never read again
                self._answers.clear()
            self._answers[self._key] = (now, valid)
        return valid
