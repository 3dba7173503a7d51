"""The dashboard's login and logout: a server-side session whose id the `cohort_session`
cookie holds (never the token), and the redirect to /login of a page asked without one."""

from __future__ import annotations

import datetime as dt
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from api.deps import SESSION_COOKIE, RedisDep, SessionCookie, SessionDep, SettingsDep
from api.login_throttle import LoginThrottled, check_login_allowed, record_failed_login
from api.routes.pages import render
from services.auth import sessions, tokens
from services.auth.scopes import Scope, holds
from services.exceptions import Unauthorized

# Logging in and out needs no scope (and no session).
router = APIRouter(tags=["dashboard"], include_in_schema=False)


async def login_required(request: Request, _: Exception) -> Response:
    """A page asked without a live login session (`LoginRequired` of api/deps.py): the
    login form, back here after; a fragment (/partials/…) answers 401, on which the page's
    JavaScript goes to the login form."""
    if request.url.path.startswith("/partials/"):
        return Response(status_code=401)
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"/login?next={quote(_safe_next(target))}", status_code=303)


def _safe_next(target: str | None) -> str:
    # Only a path on this site: '//evil.example' or 'https://…' would be an open redirect.
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


@router.get("/login")
def login_page(request: Request, next: str = "/") -> HTMLResponse:
    return render(request, "login.html", None, next=_safe_next(next), error=None)


def _login_error(request: Request, next: str, code: int, message: str) -> HTMLResponse:
    return render(
        request,
        "login.html",
        None,
        code=code,
        next=_safe_next(next),
        error=message.replace("COHORT_TOKEN", "the token"),
    )


@router.post("/login", response_model=None)
def login(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    bus: RedisDep,
    token: Annotated[str, Form(max_length=512)] = "",
    next: Annotated[str, Form(max_length=2048)] = "/",
) -> Response:
    """Check the token and open a session: the HttpOnly, SameSite=Strict cookie holds the
    session's id, never the token. Too many failures from one address: 429 until its
    window ends (api/login_throttle.py)."""
    address = request.client.host if request.client else "unknown"
    try:
        check_login_allowed(bus, settings, address)
        row = tokens.authenticate(session=session, token=token.strip())
    except LoginThrottled as exc:
        page = _login_error(request, next, 429, str(exc))
        page.headers["Retry-After"] = str(exc.retry_after)
        return page
    except Unauthorized as exc:
        record_failed_login(bus, settings, address)
        return _login_error(request, next, 401, str(exc))
    if not holds(row.scopes, Scope.READ):
        return _login_error(
            request,
            next,
            403,
            "this token lacks the 'read' scope the dashboard needs: log in with one that has it",
        )
    lifetime = dt.timedelta(seconds=settings.SESSION_LIFETIME)
    session_id, opened = sessions.create_session(session=session, token=row, lifetime=lifetime)
    max_age = int((opened.expires_at - opened.created_at).total_seconds())
    response = RedirectResponse(_safe_next(next), status_code=303)
    # Secure whenever the request came over HTTPS: behind a proxy uvicorn takes the scheme
    # from X-Forwarded-Proto, if the proxy's address is in FORWARDED_ALLOW_IPS.
    response.set_cookie(
        SESSION_COOKIE,
        session_id,
        max_age=max_age,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return response


@router.post("/logout")
def logout(session: SessionDep, session_id: SessionCookie = None) -> RedirectResponse:
    """End the session (the cookie's id is worthless from now on) and clear the cookie."""
    if session_id:
        sessions.end_session(session=session, session_id=session_id)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict")
    return response
