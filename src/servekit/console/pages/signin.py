"""Signing in and out (``/console/login``, ``POST /console/logout``): an admin access key of the servekit home
opens a session (a signed cookie, :mod:`servekit.console.auth`); the login form carries its own CSRF token."""

from __future__ import annotations

import secrets

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute

from servekit.console import auth
from servekit.console.render import esc
from servekit.console.web import HEADERS, Console, local, read_form


def routes(console: Console) -> list[BaseRoute]:
    return [
        console.route("/console/login", login_get, methods=["GET"]),
        console.route("/console/login", login_post, methods=["POST"]),
        console.route("/console/logout", logout, methods=["POST"]),
    ]


def login_page(console: Console, request: Request, error: str = "", status: int = 200) -> Response:
    token = secrets.token_urlsafe(24)
    nxt = local(request.query_params.get("next") or "/console/")
    response = console.html(request, "Sign in", login_body(token, error, nxt), status=status)
    response.set_cookie(auth.LOGIN_COOKIE, token, httponly=True, samesite="strict", path="/console")
    return response


async def login_get(console: Console, request: Request) -> Response:
    return login_page(console, request)


async def login_post(console: Console, request: Request) -> Response:
    form = await read_form(request)
    token, cookie = str(form.get("csrf", "")), request.cookies.get(auth.LOGIN_COOKIE, "")
    if not token or not cookie or not secrets.compare_digest(token, cookie):
        return login_page(console, request, "The sign-in form expired; try again.", 403)
    key_id, secret = str(form.get("access_key_id", "")), str(form.get("secret_access_key", ""))
    why = auth.check_login(console.keys, key_id, secret)
    if why is not None:
        return login_page(console, request, why, 401)
    cfg = console.config
    response = RedirectResponse(local(str(form.get("next", "/console/"))), 303, headers=HEADERS)
    value = auth.issue(key_id.strip(), secret.strip(), cfg.clock())
    response.set_cookie(
        auth.COOKIE, value, max_age=cfg.session_ttl_s, httponly=True, samesite="strict", path="/console"
    )
    response.delete_cookie(auth.LOGIN_COOKIE, path="/console")
    return response


async def logout(console: Console, request: Request) -> Response:
    got = await console.acting(request)
    if isinstance(got, Response):
        return got
    response = RedirectResponse("/console/", 303, headers=HEADERS)
    response.delete_cookie(auth.COOKIE, path="/console")
    return response


def login_body(token: str, error: str = "", next_path: str = "/console/") -> str:
    err = f'<p role="alert" class="error">{esc(error)}</p>' if error else ""
    return (
        f"{err}<p>Actions (approving a model package, shifting weights) need an admin access key of this servekit "
        "home (its <code>credentials.json</code>). Viewing needs none.</p>"
        '<form method="post" action="/console/login" class="login">'
        f'<input type="hidden" name="csrf" value="{esc(token)}">'
        f'<input type="hidden" name="next" value="{esc(next_path)}">'
        '<label for="key">Access key id</label><input id="key" name="access_key_id" autocomplete="username" required>'
        '<label for="secret">Secret access key</label>'
        '<input id="secret" name="secret_access_key" type="password" autocomplete="current-password" required>'
        '<button type="submit">Sign in</button></form>'
    )
