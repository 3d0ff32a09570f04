"""create_app composes the pages' routes (servekit.console.pages): every console path with its methods, in the
order they are tried, and the public names the rest of servekit imports."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

from servekit.console import ApiFailure, ConsoleConfig, create_app
from servekit.console.app import ConsoleConfig as ConfigOfApp

ROUTES = [
    ("/console", ["GET", "HEAD"]),
    ("/console/", ["GET", "HEAD"]),
    ("/console/api/endpoints", ["GET", "HEAD"]),
    ("/console/endpoints/{name}", ["GET", "HEAD"]),
    ("/console/endpoints/{name}/data", ["GET", "HEAD"]),
    ("/console/endpoints/{name}/weights", ["POST"]),
    ("/console/endpoints/{name}/rollback", ["POST"]),
    ("/console/registry", ["GET", "HEAD"]),
    ("/console/registry/package", ["GET", "HEAD"]),
    ("/console/registry/approve", ["POST"]),
    ("/console/monitoring", ["GET", "HEAD"]),
    ("/console/monitoring/report", ["GET", "HEAD"]),
    ("/console/jobs", ["GET", "HEAD"]),
    ("/console/api/jobs", ["GET", "HEAD"]),
    ("/console/jobs/{name}", ["GET", "HEAD"]),
    ("/console/api/jobs/{name}", ["GET", "HEAD"]),
    ("/console/processing", ["GET", "HEAD"]),
    ("/console/api/processing", ["GET", "HEAD"]),
    ("/console/processing/{name}", ["GET", "HEAD"]),
    ("/console/api/processing/{name}", ["GET", "HEAD"]),
    ("/console/training", ["GET", "HEAD"]),
    ("/console/api/training", ["GET", "HEAD"]),
    ("/console/training/{name}", ["GET", "HEAD"]),
    ("/console/api/training/{name}", ["GET", "HEAD"]),
    ("/console/tuning", ["GET", "HEAD"]),
    ("/console/api/tuning", ["GET", "HEAD"]),
    ("/console/tuning/{name}", ["GET", "HEAD"]),
    ("/console/api/tuning/{name}", ["GET", "HEAD"]),
    ("/console/pipelines", ["GET", "HEAD"]),
    ("/console/api/pipelines", ["GET", "HEAD"]),
    ("/console/pipelines/execution", ["GET", "HEAD"]),
    ("/console/api/pipelines/execution", ["GET", "HEAD"]),
    ("/console/login", ["GET", "HEAD"]),
    ("/console/login", ["POST"]),
    ("/console/logout", ["POST"]),
]


async def no_api(service: str, operation: str, params: dict[str, Any], acting: str | None) -> dict[str, Any]:
    if operation.startswith("List"):
        return {}
    raise ApiFailure("ValidationException", f"{operation} not found", 400)


def no_keys(access_key_id: str) -> tuple[str, str] | None:
    return None


def test_the_app_is_the_pages_routes_then_the_static_files() -> None:
    app = create_app(no_api, no_keys)
    *routes, static = app.routes
    assert [(r.path, sorted(r.methods or ())) for r in routes if isinstance(r, Route)] == ROUTES
    assert len(routes) == len(ROUTES)
    assert isinstance(static, Mount) and static.path == "/console/static"


def test_each_page_answers_through_the_composed_app() -> None:
    with TestClient(create_app(no_api, no_keys), follow_redirects=False) as client:
        pages = ("/console/", "/console/registry", "/console/jobs", "/console/pipelines", "/console/login")
        for path in (*pages, "/console/processing", "/console/training", "/console/tuning"):
            r = client.get(path)
            assert r.status_code == 200, path
            assert r.headers["cache-control"] == "no-store"
        assert client.get("/console/endpoints/x").status_code == 404
        assert client.get("/console/training/x").status_code == 404
        assert client.get("/console/registry/package", params={"arn": "a"}).status_code == 404
        assert client.post("/console/registry/approve").status_code == 401


def test_the_config_keeps_its_names_and_checks() -> None:
    assert ConfigOfApp is ConsoleConfig
    with pytest.raises(ValueError, match="default_range_s"):
        ConsoleConfig(default_range_s=7)
    with pytest.raises(ValueError, match="resolution_s"):
        ConsoleConfig(resolution_s=0)
