"""What every page of the console shares: its configuration, the security headers, and the request context a
route handler gets (the API, the session, the page response, the API-failure page, the forms of actions).

A page module (:mod:`servekit.console.pages`) owns its handlers, each ``async def handler(console, request)``,
and hands :func:`servekit.console.app.create_app` its routes through :meth:`Console.route`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from servekit.console import auth
from servekit.console.charts import RANGES_S
from servekit.console.client import ApiCall, ApiFailure, KeyLookup
from servekit.console.render import esc, page

HEADERS = {
    # scripts and styles from the console's own files only (the JSON data blocks are not scripts)
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


@dataclass(frozen=True)
class ConsoleConfig:
    """``resolution_s``: the metrics store's resolution (a chart period is a multiple of it); ``session_ttl_s``:
    how long a sign-in lasts; ``default_range_s``: the charts' range when the page opens."""

    resolution_s: int = 60
    session_ttl_s: int = auth.DEFAULT_TTL_S
    default_range_s: int = 900
    clock: Callable[[], float] = field(default=time.time, compare=False)

    def __post_init__(self) -> None:
        if self.resolution_s <= 0:
            raise ValueError(f"resolution_s must be a positive number of seconds, not {self.resolution_s}")
        if self.session_ttl_s <= 0:
            raise ValueError(f"session_ttl_s must be positive, not {self.session_ttl_s}")
        if self.default_range_s not in RANGES_S:
            raise ValueError(f"default_range_s must be one of {RANGES_S}, not {self.default_range_s}")


@dataclass(frozen=True)
class Console:
    """One console app's API, keys and configuration, with the helpers its handlers share."""

    api: ApiCall
    keys: KeyLookup
    config: ConsoleConfig

    def route(
        self, path: str, handler: Callable[[Console, Request], Awaitable[Response]], methods: list[str] | None = None
    ) -> Route:
        """A route to ``handler`` with this console bound (named as the handler)."""

        async def endpoint(request: Request) -> Response:
            return await handler(self, request)

        return Route(path, endpoint, methods=methods, name=handler.__name__)

    def session(self, request: Request) -> auth.Session | None:
        cfg = self.config
        return auth.verify(self.keys, request.cookies.get(auth.COOKIE), cfg.clock(), cfg.session_ttl_s)

    def html(self, request: Request, title: str, body: str, active: str = "", status: int = 200) -> HTMLResponse:
        s = self.session(request)
        doc = page(title, body, active=active, user=s.access_key_id if s else None, csrf=s.csrf if s else None)
        return HTMLResponse(doc, status, headers=HEADERS)

    def failed(self, request: Request, exc: ApiFailure) -> HTMLResponse:
        # the API's 4xx is the caller's (a name that does not exist, a malformed ARN); anything else is the plane's
        missing = exc.code == "ResourceNotFound" or "not found" in exc.message.lower()
        status = (404 if missing else 400) if 400 <= exc.status < 500 else 502
        body = f'<p role="alert" class="error">{esc(exc.code)}: {esc(exc.message)}</p>'
        title = {404: "Not found", 400: "Not a valid request"}.get(status, "The API answered with an error")
        return self.html(request, title, body, status=status)

    def range_of(self, request: Request) -> int:
        raw = request.query_params.get("range", "")
        return int(raw) if raw.isdigit() and int(raw) in RANGES_S else self.config.default_range_s

    async def acting(self, request: Request) -> tuple[auth.Session, dict[str, str]] | Response:
        """The session and form of an action, or the refusal: 401 without a session, 403 without its CSRF token."""
        s = self.session(request)
        if s is None:
            body = '<p role="alert" class="error">Sign in to act.</p><p><a href="/console/login">Sign in</a></p>'
            return self.html(request, "Sign in required", body, status=401)
        form = await read_form(request)
        if not auth.csrf_ok(s, form.get("csrf")):
            body = '<p role="alert" class="error">The form is missing its CSRF token or it is stale.</p>'
            return self.html(request, "Refused", body, status=403)
        return s, form


_MAX_FORM = 64 * 1024


async def read_form(request: Request) -> dict[str, str]:
    """A urlencoded form (the console's forms are only that; no multipart parser needed), at most 64 KiB; a
    field given twice keeps its first value."""
    if not request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        return {}
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > _MAX_FORM:
            return {}
    fields: dict[str, str] = {}
    for k, v in parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True):
        fields.setdefault(k, v)
    return fields


def local(path: str) -> str:
    """Only a path inside the console may be a redirect target (no open redirect through ``next``)."""
    return path if path.startswith("/console/") and not path.startswith("//") and "\\" not in path else "/console/"


def back(path: str, message: str) -> Response:
    """After an action: back to ``path``, with what happened as its flash message."""
    return RedirectResponse(f"{path}?{urlencode({'flash': message})}", 303, headers=HEADERS)
