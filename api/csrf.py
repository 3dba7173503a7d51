"""Cross-site request refusal: an unsafe request that the dashboard's login cookie
authenticates must come from a page of this site.

A browser attaches the cookie to a request another site's page makes (a form posted to
`/api/v1/jobs/7/cancel`); SameSite=Strict stops that in browsers that honour it, this
check in all of them. Browsers name the page's site in `Origin` on every POST, PUT,
PATCH and DELETE (and scripts cannot change it); `Referer` stands in when a browser
leaves `Origin` out. A request with neither is refused: a browser always sends one of
them, and a script that does not can send `Authorization: Bearer` instead of a cookie.

Requests that a bearer token authenticates are not checked: another site's page cannot
make a browser add that header (it would need a CORS preflight this api never grants).
Whether the bearer or the cookie authenticates is decided by one function
(`api.credentials.bearer_token`): an empty or malformed `Authorization` header falls back to the
cookie there, so it is checked here. `POST /login` is checked with or
without a cookie (login CSRF: another site logging the browser in as the attacker).

The check is independent of what the cookie holds (a token or a session id): only its
presence matters.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.requests import cookie_parser
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from api.credentials import bearer_token
from api.deps import SESSION_COOKIE

UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# The dashboard's login cookie (api/deps.py); with it a browser acts as its user.
LOGIN_COOKIES = (SESSION_COOKIE,)
LOGIN_PATH = "/login"
_DEFAULT_PORTS = {"http": "80", "https": "443"}


def _origin(scheme: str, netloc: str) -> str:
    """`scheme://host[:port]`, lower case, without the scheme's default port."""
    scheme, netloc = scheme.lower(), netloc.lower()
    host, _, port = netloc.rpartition(":")
    if host and not netloc.endswith("]") and port == _DEFAULT_PORTS.get(scheme):
        netloc = host
    return f"{scheme}://{netloc}"


def own_origin(scope: Scope) -> str:
    """This site's origin as the request sees it: its scheme (which uvicorn takes from a
    trusted proxy's `X-Forwarded-Proto`) and the `Host` it was sent to."""
    host = Headers(scope=scope).get("host")
    if not host:
        server_host, port = scope.get("server") or ("localhost", None)
        host = f"{server_host}:{port}" if port else str(server_host)
    return _origin(scope.get("scheme", "http"), host)


def request_origin(headers: Headers) -> tuple[str, str] | None:
    """The sending page's origin and the header it came from, or None without either."""
    origin = headers.get("origin")
    if origin is not None:
        # "null" (a sandboxed frame, a data: page) is nobody's origin: never this site's.
        parts = urlsplit(origin)
        return (_origin(parts.scheme, parts.netloc) if parts.netloc else origin), "Origin"
    referer = headers.get("referer")
    if referer:
        parts = urlsplit(referer)
        return _origin(parts.scheme, parts.netloc), "Referer"
    return None


def _needs_check(scope: Scope, headers: Headers) -> bool:
    if scope["method"] not in UNSAFE_METHODS:
        return False
    if scope["path"] == LOGIN_PATH:
        return True
    if bearer_token(headers.get("authorization")) is not None:
        return False  # the bearer authenticates it, not the cookie
    cookies = cookie_parser(headers.get("cookie", ""))
    return any(name in cookies for name in LOGIN_COOKIES)


def refusal(scope: Scope, headers: Headers) -> str | None:
    """Why the request is refused as cross-site, or None when it may go on."""
    if not _needs_check(scope, headers):
        return None
    mine = own_origin(scope)
    sent = request_origin(headers)
    if sent is None:
        return (
            f"cross-site request refused: it carries no Origin or Referer header, so "
            f"nothing shows it comes from a page of {mine}; send it from the dashboard, "
            "or authenticate with `Authorization: Bearer <token>` instead of the cookie"
        )
    origin, header = sent
    if origin != mine:
        return (
            f"cross-site request refused: its {header} is {origin}, not this site "
            f"({mine}); send it from the dashboard, or authenticate with "
            "`Authorization: Bearer <token>` instead of the cookie (behind a proxy, "
            "pass the Host header through and list the proxy in FORWARDED_ALLOW_IPS)"
        )
    return None


class SameOriginOnly:
    """ASGI middleware: 403 (Cohort's error body) for an unsafe cookie-authenticated
    request, or a login, from another site."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = Headers(scope=scope)
            reason = refusal(scope, headers)
            if reason is not None:
                field = "Origin" if "origin" in headers or "referer" not in headers else "Referer"
                response = JSONResponse(
                    status_code=403,
                    content={
                        "error": "forbidden",
                        "message": reason,
                        "fields": [{"field": field, "message": reason}],
                    },
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
