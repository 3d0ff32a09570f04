"""The console's ASGI app (Starlette): pages, their JSON for live updates, sign-in and the few actions.

Everything it shows comes from the injected :data:`~servekit.console.client.ApiCall`; GET never changes state;
a POST that acts needs a signed session cookie and the session's CSRF token (401 without a session, 403 with a
wrong or missing token). Routes carry their full ``/console`` paths, so ``servekit up`` hands the scope over as is.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlencode

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from servekit.console import auth, data, views
from servekit.console.client import ApiCall, ApiFailure, KeyLookup
from servekit.console.render import esc, page

STATIC = Path(__file__).parent / "static"
_HEADERS = {
    # scripts and styles from the console's own files only (the JSON data blocks are not scripts)
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
_REPORT_CSP = "sandbox; default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'none'"


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
        if self.default_range_s not in data.RANGES_S:
            raise ValueError(f"default_range_s must be one of {data.RANGES_S}, not {self.default_range_s}")


Handler = Callable[[Request], Awaitable[Response]]


def create_app(api: ApiCall, keys: KeyLookup, config: ConsoleConfig | None = None) -> Starlette:
    cfg = config or ConsoleConfig()

    def session(request: Request) -> auth.Session | None:
        return auth.verify(keys, request.cookies.get(auth.COOKIE), cfg.clock(), cfg.session_ttl_s)

    def html(request: Request, title: str, body: str, active: str = "", status: int = 200) -> HTMLResponse:
        s = session(request)
        doc = page(title, body, active=active, user=s.access_key_id if s else None, csrf=s.csrf if s else None)
        return HTMLResponse(doc, status, headers=_HEADERS)

    def failed(request: Request, exc: ApiFailure) -> HTMLResponse:
        # the API's 4xx is the caller's (a name that does not exist, a malformed ARN); anything else is the plane's
        missing = exc.code == "ResourceNotFound" or "not found" in exc.message.lower()
        status = (404 if missing else 400) if 400 <= exc.status < 500 else 502
        body = f'<p role="alert" class="error">{esc(exc.code)}: {esc(exc.message)}</p>'
        title = {404: "Not found", 400: "Not a valid request"}.get(status, "The API answered with an error")
        return html(request, title, body, status=status)

    async def endpoints(request: Request) -> Response:
        summaries = await data.endpoint_summaries(api)
        return html(request, "Endpoints", views.endpoints_body(summaries), "/console/")

    async def endpoints_json(request: Request) -> Response:
        summaries = await data.endpoint_summaries(api)
        return JSONResponse(
            {"endpoints": summaries, "html": {"endpoints": views.endpoints_table(summaries)}}, headers=_HEADERS
        )

    def range_of(request: Request) -> int:
        raw = request.query_params.get("range", "")
        return int(raw) if raw.isdigit() and int(raw) in data.RANGES_S else cfg.default_range_s

    async def endpoint(request: Request) -> Response:
        name = request.path_params["name"]
        try:
            detail = await data.endpoint_detail(api, name)
        except ApiFailure as exc:
            return failed(request, exc)
        if detail is None:
            body = f'<p role="alert" class="error">No endpoint named {esc(name)}.</p>'
            return html(request, "Not found", body, status=404)
        s = session(request)
        sections = views.endpoint_sections(detail, s.csrf if s else None, cfg.clock())
        flash = request.query_params.get("flash", "")
        return html(request, f"Endpoint {name}", views.endpoint_body(name, sections, range_of(request), flash))

    async def endpoint_json(request: Request) -> Response:
        name = request.path_params["name"]
        detail = await data.endpoint_detail(api, name)
        if detail is None:
            return JSONResponse({"message": f"No endpoint named {name}."}, 404, headers=_HEADERS)
        s = session(request)
        now = cfg.clock()
        variants = [v["VariantName"] for v in detail["endpoint"].get("ProductionVariants", [])]
        period, charts, scaling = await data.endpoint_charts(
            api, name, variants, range_of(request), cfg.resolution_s, now, detail["activities"]
        )
        return JSONResponse(
            {
                "endpoint": detail["endpoint"],
                "html": views.endpoint_sections(detail, s.csrf if s else None, now),
                **views.charts_json(period, charts),
                "scaling_charts": [c.as_json() for c in scaling],
                "now": now,
            },
            headers=_HEADERS,
        )

    async def registry(request: Request) -> Response:
        s = session(request)
        groups = await data.registry(api)
        return html(
            request, "Models & registry", views.registry_body(groups, s.csrf if s else None), "/console/registry"
        )

    async def package(request: Request) -> Response:
        arn = request.query_params.get("arn", "")
        if not arn:
            return html(request, "Not found", '<p role="alert" class="error">Which package? (?arn=)</p>', status=400)
        try:
            described = await data.model_package(api, arn)
            lineage = await data.package_lineage(api, described)
        except ApiFailure as exc:
            return failed(request, exc)
        title = f"{described.get('ModelPackageGroupName')} version {described.get('ModelPackageVersion')}"
        return html(request, title, views.package_body(described, lineage), "/console/registry")

    async def monitoring(request: Request) -> Response:
        return html(request, "Monitoring", views.monitoring_body(await data.monitoring(api)), "/console/monitoring")

    async def jobs(request: Request) -> Response:
        return html(request, "Batch transform jobs", views.jobs_body(await data.transform_jobs(api)), "/console/jobs")

    async def jobs_json(request: Request) -> Response:
        found = await data.transform_jobs(api)
        return JSONResponse({"jobs": found, "html": {"transform": views.transform_table(found)}}, headers=_HEADERS)

    async def pipelines(request: Request) -> Response:
        found = await data.pipelines(api)
        return html(request, "Pipelines", views.pipelines_body(found), "/console/pipelines")

    async def pipelines_json(request: Request) -> Response:
        found = await data.pipelines(api)
        return JSONResponse({"pipelines": found, "html": {"pipelines": views.pipelines_table(found)}}, headers=_HEADERS)

    async def execution(request: Request) -> Response:
        arn = request.query_params.get("arn", "")
        if not arn:
            body = '<p role="alert" class="error">Which execution? (?arn=PipelineExecutionArn)</p>'
            return html(request, "Not found", body, "/console/pipelines", status=400)
        try:
            found = await data.pipeline_execution(api, arn)
        except ApiFailure as exc:
            return failed(request, exc)
        name = found["execution"].get("PipelineExecutionDisplayName") or arn.rsplit("/", 1)[-1]
        return html(request, f"Pipeline execution {name}", views.execution_body(arn, found), "/console/pipelines")

    async def execution_json(request: Request) -> Response:
        try:
            found = await data.pipeline_execution(api, request.query_params.get("arn", ""))
        except ApiFailure as exc:
            return JSONResponse({"message": exc.message}, 404 if exc.status == 400 else 502, headers=_HEADERS)
        return JSONResponse({**found, "html": {"execution": views.execution_section(found)}}, headers=_HEADERS)

    async def report(request: Request) -> Response:
        """A file of a monitoring execution's output folder (its HTML report, violations, metrics), for a signed-in
        user only (reports hold samples of captured data); a path that leaves the folder is refused."""
        if session(request) is None:
            back = quote(f"/console/monitoring/report?{request.url.query}", safe="")
            body = (
                '<p role="alert" class="error">Sign in to open reports.</p>'
                f'<p><a href="/console/login?next={back}">Sign in</a></p>'
            )
            return html(request, "Sign in required", body, "/console/monitoring", status=401)
        job, name = request.query_params.get("job", ""), request.query_params.get("file", "")
        if not job or not name:
            body = '<p role="alert" class="error">Which report? (?job=processing job name&amp;file=report.html)</p>'
            return html(request, "Not found", body, "/console/monitoring", status=400)
        try:
            root = await data.output_folder(api, job)
        except ApiFailure as exc:
            return failed(request, exc)
        if root is None:
            body = '<p role="alert" class="error">This execution\'s output is not on this machine\'s disk.</p>'
            return html(request, "Not here", body, "/console/monitoring", status=404)
        base = root.resolve()
        target = (base / name).resolve()  # symlinks followed: a link out of the folder is refused too
        if not target.is_relative_to(base) or target == base:
            body = f'<p role="alert" class="error">{esc(name)} is outside the execution\'s output folder.</p>'
            return html(request, "Refused", body, "/console/monitoring", status=403)
        if not target.is_file():
            body = f'<p role="alert" class="error">No file {esc(name)} in the execution\'s output folder.</p>'
            return html(request, "Not found", body, "/console/monitoring", status=404)
        kind = {".html": "text/html; charset=utf-8", ".json": "application/json"}.get(target.suffix, "text/plain")
        # the report's own inline styles and SVG only; sandboxed: no script, no navigation, no form
        headers = {**_HEADERS, "Content-Security-Policy": _REPORT_CSP}
        return Response(target.read_bytes(), media_type=kind, headers=headers)

    # ---- sign-in ----------------------------------------------------------------------------------------------
    def login_page(request: Request, error: str = "", status: int = 200) -> Response:
        token = secrets.token_urlsafe(24)
        nxt = _local(request.query_params.get("next") or "/console/")
        response = html(request, "Sign in", views.login_body(token, error, nxt), status=status)
        response.set_cookie(auth.LOGIN_COOKIE, token, httponly=True, samesite="strict", path="/console")
        return response

    async def login_get(request: Request) -> Response:
        return login_page(request)

    async def login_post(request: Request) -> Response:
        form = await _form(request)
        token, cookie = str(form.get("csrf", "")), request.cookies.get(auth.LOGIN_COOKIE, "")
        if not token or not cookie or not secrets.compare_digest(token, cookie):
            return login_page(request, "The sign-in form expired; try again.", 403)
        key_id, secret = str(form.get("access_key_id", "")), str(form.get("secret_access_key", ""))
        why = auth.check_login(keys, key_id, secret)
        if why is not None:
            return login_page(request, why, 401)
        response = RedirectResponse(_local(str(form.get("next", "/console/"))), 303, headers=_HEADERS)
        value = auth.issue(key_id.strip(), secret.strip(), cfg.clock())
        response.set_cookie(
            auth.COOKIE, value, max_age=cfg.session_ttl_s, httponly=True, samesite="strict", path="/console"
        )
        response.delete_cookie(auth.LOGIN_COOKIE, path="/console")
        return response

    async def acting(request: Request) -> tuple[auth.Session, dict[str, str]] | Response:
        """The session and form of an action, or the refusal: 401 without a session, 403 without its CSRF token."""
        s = session(request)
        if s is None:
            body = '<p role="alert" class="error">Sign in to act.</p><p><a href="/console/login">Sign in</a></p>'
            return html(request, "Sign in required", body, status=401)
        form = await _form(request)
        if not auth.csrf_ok(s, form.get("csrf")):
            body = '<p role="alert" class="error">The form is missing its CSRF token or it is stale.</p>'
            return html(request, "Refused", body, status=403)
        return s, form

    async def logout(request: Request) -> Response:
        got = await acting(request)
        if isinstance(got, Response):
            return got
        response = RedirectResponse("/console/", 303, headers=_HEADERS)
        response.delete_cookie(auth.COOKIE, path="/console")
        return response

    async def weights(request: Request) -> Response:
        got = await acting(request)
        if isinstance(got, Response):
            return got
        s, form = got
        name = request.path_params["name"]
        back = views.endpoint_href(name)
        try:
            desired = [
                {"VariantName": k.removeprefix("weight:"), "DesiredWeight": float(v)}
                for k, v in form.items()
                if k.startswith("weight:")
            ]
        except ValueError:
            return _back(back, "Weights must be numbers.")
        if not desired:
            return _back(back, "No weights given.")
        try:
            await api(
                "sagemaker",
                "UpdateEndpointWeightsAndCapacities",
                {"EndpointName": name, "DesiredWeightsAndCapacities": desired},
                s.access_key_id,
            )
        except ApiFailure as exc:
            return _back(back, f"Not applied: {exc.message}")
        return _back(back, "Weights submitted: the endpoint is Updating.")

    async def rollback(request: Request) -> Response:
        """Stop a rollout the public way: SetAlarmState(ALARM) on one of the alarms that can guard it."""
        got = await acting(request)
        if isinstance(got, Response):
            return got
        s, form = got
        name, alarm = request.path_params["name"], form.get("alarm", "")
        back = views.endpoint_href(name)
        detail = await data.endpoint_detail(api, name)
        if detail is None:
            return _back(back, f"No endpoint named {name}.")
        if not detail["endpoint"].get("PendingDeploymentSummary"):
            return _back(back, "No rollout is in progress: nothing to stop.")
        if alarm not in views.rollback_alarms(detail):
            return _back(back, f"{alarm!r} is not an alarm of this endpoint's rollout; pick one of its buttons.")
        try:
            await api(
                "cloudwatch",
                "SetAlarmState",
                {
                    "AlarmName": alarm,
                    "StateValue": "ALARM",
                    "StateReason": f"Rollback requested in the servekit console by {s.access_key_id}",
                },
                s.access_key_id,
            )
        except ApiFailure as exc:
            return _back(back, f"Not applied: {exc.message}")
        return _back(back, f"{alarm} set to ALARM: a deployment watching it rolls back.")

    async def approve(request: Request) -> Response:
        got = await acting(request)
        if isinstance(got, Response):
            return got
        s, form = got
        arn = form.get("package", "")
        back = "/console/registry/package?arn=" + quote(arn, safe="")
        try:
            await api(
                "sagemaker",
                "UpdateModelPackage",
                {"ModelPackageArn": arn, "ModelApprovalStatus": "Approved", "ApprovalDescription": "console"},
                s.access_key_id,
            )
        except ApiFailure as exc:
            return html(request, "Not approved", f'<p role="alert" class="error">{esc(exc.message)}</p>', status=400)
        return RedirectResponse(back, 303, headers=_HEADERS)

    async def root(request: Request) -> Response:
        return RedirectResponse("/console/", 307)

    return Starlette(
        routes=[
            Route("/console", root),
            Route("/console/", endpoints),
            Route("/console/api/endpoints", endpoints_json),
            Route("/console/endpoints/{name}", endpoint),
            Route("/console/endpoints/{name}/data", endpoint_json),
            Route("/console/endpoints/{name}/weights", weights, methods=["POST"]),
            Route("/console/endpoints/{name}/rollback", rollback, methods=["POST"]),
            Route("/console/registry", registry),
            Route("/console/registry/package", package),
            Route("/console/registry/approve", approve, methods=["POST"]),
            Route("/console/monitoring", monitoring),
            Route("/console/monitoring/report", report),
            Route("/console/jobs", jobs),
            Route("/console/api/jobs", jobs_json),
            Route("/console/pipelines", pipelines),
            Route("/console/api/pipelines", pipelines_json),
            Route("/console/pipelines/execution", execution),
            Route("/console/api/pipelines/execution", execution_json),
            Route("/console/login", login_get, methods=["GET"]),
            Route("/console/login", login_post, methods=["POST"]),
            Route("/console/logout", logout, methods=["POST"]),
            Mount("/console/static", StaticFiles(directory=STATIC), name="static"),
        ]
    )


_MAX_FORM = 64 * 1024


async def _form(request: Request) -> dict[str, str]:
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


def _local(path: str) -> str:
    """Only a path inside the console may be a redirect target (no open redirect through ``next``)."""
    return path if path.startswith("/console/") and not path.startswith("//") and "\\" not in path else "/console/"


def _back(path: str, message: str) -> Response:
    return RedirectResponse(f"{path}?{urlencode({'flash': message})}", 303, headers=_HEADERS)
