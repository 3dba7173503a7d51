"""Request bodies bounded before they are read whole: COHORT_MAX_REQUEST_BYTES.

A pure ASGI middleware: a declared Content-Length over the bound is answered 413 before
a byte is read; a body without one (chunked) is counted as it streams and refused as soon
as it passes the bound. Uploads (api/uploads.py) keep their own, larger bounds.

(FastAPI's own `max_body_size` answers a declared length with Starlette's plain-text 413,
replacing whatever the app answered: not Cohort's error body.)
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.errors import error_response


def too_large_message(limit: int) -> str:
    return (
        f"the request body is over the limit of {limit} bytes "
        "(COHORT_MAX_REQUEST_BYTES): put large data in the artifact store "
        "(PUT /api/v1/data/{path}) or the code bundle and name it in the spec"
    )


class BodyTooLarge(HTTPException):
    """Raised by `receive` when a streamed body passes the bound; an HTTPException, so
    FastAPI's body reading lets it through to the error handlers (413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(status_code=413, detail=too_large_message(limit))


class BodyLimit:
    """Refuse request bodies over `max_bytes` (413), except where `exempt(method, path)`."""

    def __init__(self, app: ASGIApp, max_bytes: int, exempt: Callable[[str, str], bool]) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.exempt = exempt

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.exempt(scope["method"], scope["path"]):
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            response = error_response(413, too_large_message(self.max_bytes))
            await response(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        await self.app(scope, counted, send)
