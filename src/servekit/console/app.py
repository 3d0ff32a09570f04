"""The console's ASGI app (Starlette): the routes of its pages (:mod:`servekit.console.pages`), each page's JSON
for live updates, sign-in and the few actions, and its static files.

Everything it shows comes from the injected :data:`~servekit.console.client.ApiCall`; GET never changes state;
a POST that acts needs a signed session cookie and the session's CSRF token (401 without a session, 403 with a
wrong or missing token). Routes carry their full ``/console`` paths, so ``servekit up`` hands the scope over as is.
"""

from __future__ import annotations

from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from servekit.console.client import ApiCall, KeyLookup
from servekit.console.pages import (
    endpoint,
    endpoints,
    job,
    jobs,
    monitoring,
    pipelines,
    processing,
    registry,
    rollout,
    signin,
    training,
    tuning,
)
from servekit.console.web import Console, ConsoleConfig

STATIC = Path(__file__).parent / "static"
# in the order their routes are tried (no two pages share a path and method)
PAGES = (endpoints, endpoint, rollout, registry, monitoring, jobs, job, processing, training, tuning, pipelines, signin)

__all__ = ["ConsoleConfig", "create_app"]  # ConsoleConfig lives in web.py; importable from here as before


def create_app(api: ApiCall, keys: KeyLookup, config: ConsoleConfig | None = None) -> Starlette:
    console = Console(api, keys, config or ConsoleConfig())
    routes: list[BaseRoute] = [Route("/console", root)]
    for page in PAGES:
        routes += page.routes(console)
    routes.append(Mount("/console/static", StaticFiles(directory=STATIC), name="static"))
    return Starlette(routes=routes)


async def root(request: Request) -> Response:
    return RedirectResponse("/console/", 307)
