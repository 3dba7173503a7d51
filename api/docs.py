"""`GET /docs`: Swagger UI for the REST API, from the copy shipped in api/static/vendor/
(no CDN: the page makes no request outside this site). ReDoc is not served.

FastAPI's own page starts Swagger UI with an inline script, which the Content Security
Policy (api/security_headers.py) blocks; this page loads api/static/docs.js instead.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title} — API</title>
<link rel="stylesheet" href="/static/vendor/swagger-ui.css">
</head>
<body>
<div id="swagger-ui" data-openapi-url="{openapi_url}"></div>
<script src="/static/vendor/swagger-ui-bundle.js"></script>
<script src="/static/docs.js"></script>
</body>
</html>
"""


def install(app: FastAPI) -> None:
    """Serve Swagger UI at `/docs` (the app is built with FastAPI's docs and ReDoc off)."""
    html = PAGE.format(title=app.title, openapi_url=app.openapi_url)

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return HTMLResponse(html)
