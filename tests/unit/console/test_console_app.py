"""The console app in process over a real control plane (servekit up's own wiring, real SQLite, real API
validation; no instances): pages, sign-in, and the refusals — no session 401, no CSRF token 403, nothing changes
on GET."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from servekit.aws import Call, Credentials
from servekit.edge.plane import ControlPlane
from servekit.launch.up import build


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def plane(home: Path) -> ControlPlane:
    return build(home, metrics_resolution_s=1)


@pytest.fixture
def client(plane: ControlPlane) -> Iterator[TestClient]:
    with TestClient(plane, base_url="http://127.0.0.1", follow_redirects=False) as c:
        yield c


def dispatch(client: TestClient, plane: ControlPlane, operation: str, params: dict[str, Any]) -> Any:
    async def run() -> Any:
        return await plane.dispatch(Call("sagemaker", operation, params, None))

    assert client.portal is not None
    return client.portal.call(run)


def package(client: TestClient, plane: ControlPlane, tmp_path: Path) -> str:
    dispatch(client, plane, "CreateModelPackageGroup", {"ModelPackageGroupName": "churn"})
    (tmp_path / "m").mkdir()
    made = dispatch(
        client,
        plane,
        "CreateModelPackage",
        {
            "ModelPackageGroupName": "churn",
            "InferenceSpecification": {
                "Containers": [{"Image": "servekit", "ModelDataUrl": str(tmp_path / "m")}],
                "SupportedContentTypes": ["application/json"],
                "SupportedResponseMIMETypes": ["application/json"],
            },
            "ModelApprovalStatus": "PendingManualApproval",
        },
    )
    return str(made["ModelPackageArn"])


def sign_in(client: TestClient, key_id: str, secret: str) -> Any:
    form = client.get("/console/login")
    token = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert token is not None
    return client.post(
        "/console/login",
        data={"csrf": token.group(1), "access_key_id": key_id, "secret_access_key": secret, "next": "/console/"},
    )


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None
    return found.group(1)


def test_pages_render_from_the_api_with_security_headers(
    client: TestClient, plane: ControlPlane, tmp_path: Path
) -> None:
    package(client, plane, tmp_path)
    pages = ("/console/", "/console/registry", "/console/monitoring", "/console/jobs", "/console/pipelines")
    for path in (*pages, "/console/login"):
        r = client.get(path)
        assert r.status_code == 200, path
        assert r.headers["content-security-policy"].startswith("default-src 'self'")
        assert r.headers["x-content-type-options"] == "nosniff"
        assert '<html lang="en">' in r.text and 'href="#main"' in r.text
    assert "none yet" in client.get("/console/").text
    assert "churn" in client.get("/console/registry").text
    assert client.get("/console").headers["location"] == "/console/"
    assert client.get("/console/endpoints/nope").status_code == 404
    assert client.get("/console/api/endpoints").json()["endpoints"] == []
    assert client.get("/console/static/uPlot.iife.min.js").status_code == 200
    assert client.get("/ping").status_code == 200  # the plane's own routes are untouched


def test_actions_need_a_session_then_its_csrf_token(
    client: TestClient, plane: ControlPlane, home: Path, tmp_path: Path
) -> None:
    arn = package(client, plane, tmp_path)
    anonymous = client.post("/console/registry/approve", data={"package": arn})
    assert anonymous.status_code == 401
    assert "Approve" not in client.get("/console/registry").text  # no action offered without a session
    admin = Credentials.load(home).admin
    assert sign_in(client, admin.access_key_id, admin.secret_access_key).status_code == 303
    cookie = client.cookies.get("servekit_console")
    assert cookie and admin.secret_access_key not in cookie
    page = client.get("/console/registry").text
    assert "Approve" in page
    token = csrf_of(page)
    assert client.post("/console/registry/approve", data={"package": arn}).status_code == 403
    assert client.post("/console/registry/approve", data={"package": arn, "csrf": "x" + token}).status_code == 403
    assert client.get("/console/registry/approve", params={"package": arn, "csrf": token}).status_code == 405
    assert status_of(client, plane, arn) == "PendingManualApproval"  # nothing changes on GET or without the token
    done = client.post("/console/registry/approve", data={"package": arn, "csrf": token})
    assert done.status_code == 303
    assert status_of(client, plane, arn) == "Approved"
    described = dispatch(client, plane, "DescribeModelPackage", {"ModelPackageName": arn})
    assert described["ServekitApprovalHistory"][-1]["By"].endswith(admin.access_key_id)
    detail = client.get(done.headers["location"])
    assert detail.status_code == 200 and admin.access_key_id in detail.text


def status_of(client: TestClient, plane: ControlPlane, arn: str) -> str:
    return str(dispatch(client, plane, "DescribeModelPackage", {"ModelPackageName": arn})["ModelApprovalStatus"])


def test_sign_in_refuses_wrong_secrets_invoke_keys_and_a_missing_form_token(client: TestClient, home: Path) -> None:
    creds = Credentials.load(home)
    admin = creds.admin
    assert sign_in(client, admin.access_key_id, "wrong").status_code == 401
    invoke = creds.add_key("invoke", "app")
    refused = sign_in(client, invoke.access_key_id, invoke.secret_access_key)
    assert refused.status_code == 401 and "admin key" in refused.text
    no_token = client.post(
        "/console/login", data={"access_key_id": admin.access_key_id, "secret_access_key": admin.secret_access_key}
    )
    assert no_token.status_code == 403
    assert "servekit_console" not in client.cookies


def test_an_open_redirect_through_next_is_refused(client: TestClient, home: Path) -> None:
    admin = Credentials.load(home).admin
    form = client.get("/console/login")
    r = client.post(
        "/console/login",
        data={
            "csrf": csrf_of(form.text),
            "access_key_id": admin.access_key_id,
            "secret_access_key": admin.secret_access_key,
            "next": "//evil.example/",
        },
    )
    assert r.status_code == 303 and r.headers["location"] == "/console/"


def test_a_removed_key_ends_its_sessions(client: TestClient, home: Path) -> None:
    creds = Credentials.load(home)
    second = creds.add_key("admin", "second")
    assert sign_in(client, second.access_key_id, second.secret_access_key).status_code == 303
    assert "Sign out" in client.get("/console/").text
    creds.remove_key(second.access_key_id)
    assert "Sign out" not in client.get("/console/").text
    assert client.post("/console/logout", data={}).status_code == 401


def test_new_pages_answer_empty_lists_and_the_guarded_routes_refuse(client: TestClient, home: Path) -> None:
    assert "none yet" in client.get("/console/jobs").text
    assert client.get("/console/api/jobs").json()["jobs"] == []
    assert "No pipelines yet" in client.get("/console/pipelines").text
    assert client.get("/console/api/pipelines").json()["pipelines"] == []
    assert client.get("/console/pipelines/execution").status_code == 400
    report = client.get("/console/monitoring/report", params={"job": "j", "file": "report.html"})
    assert report.status_code == 401 and "Sign in" in report.text
    assert client.post("/console/endpoints/ep/rollback", data={"alarm": "a"}).status_code == 401
    admin = Credentials.load(home).admin
    assert sign_in(client, admin.access_key_id, admin.secret_access_key).status_code == 303
    token = csrf_of(client.get("/console/").text)
    assert client.post("/console/endpoints/ep/rollback", data={"alarm": "a"}).status_code == 403
    nothing = client.post("/console/endpoints/ep/rollback", data={"alarm": "a", "csrf": token})
    assert nothing.status_code == 303 and "No+endpoint+named+ep" in nothing.headers["location"]
    missing = client.get("/console/monitoring/report", params={"job": "nope", "file": "report.html"})
    assert missing.status_code in (400, 404) and "nope" in missing.text
