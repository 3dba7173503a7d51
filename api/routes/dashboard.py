"""The web dashboard: server-rendered pages (Jinja2, api/templates/), the HTML fragments
the pages' JavaScript refreshes live, login and logout, and the bundled static assets
(api/static/, no network).

Pages read through the same services as REST v1 and show only the logged-in token's
project; anything of another project is a 404 page. Every page is built one way
(api/routes/pages.py); a page family is a module listed in PAGES.
"""

from __future__ import annotations

from fastapi import APIRouter, FastAPI
from fastapi.staticfiles import StaticFiles

from api.deps import LoginRequired
from api.routes import cluster_pages, job_pages, login, model_pages, sweep_pages
from api.routes.pages import HERE

PAGES: tuple[APIRouter, ...] = (
    job_pages.router,
    sweep_pages.router,
    cluster_pages.router,
    model_pages.router,
)


def install(app: FastAPI) -> None:
    """Serve the dashboard at `/` and its assets at `/static`."""
    app.add_exception_handler(LoginRequired, login.login_required)
    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    app.include_router(login.router)
    for pages in PAGES:
        app.include_router(pages)
