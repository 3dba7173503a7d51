"""The security headers every response carries (pages, fragments, JSON, SSE, errors).

The dashboard and `/docs` load scripts, styles and images from this site only, with no
inline script or style attribute (api/static/ holds every script; data for a page's
script travels in `<script type="application/json">` blocks, which CSP does not run):
`default-src 'self'` then makes an injected `<script>` or `onclick=` inert. `data:`
images are allowed for Swagger UI's icons, which its stylesheet embeds; an image
cannot run code. `frame-ancestors 'none'` (and `X-Frame-Options` for browsers older
than CSP 2) stops another site framing a page to trick clicks on Cancel.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "img-src 'self' data:",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
}


class SecurityHeaders:
    """ASGI middleware: add SECURITY_HEADERS to every HTTP response that does not set its
    own value for one of them."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)
