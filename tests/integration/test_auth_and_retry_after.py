"""Bearer-token authentication over the whole app (every protocol, the inference fast path included) and
Retry-After on every "try again later" answer, through the in-process app."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from servekit.config.models import AuthTokens, ModelConfig, ServerConfig
from servekit.errors import ErrorCode, ServekitError
from servekit.serving.protocols.errors import KSERVE_STATUS, SAGEMAKER_STATUS, TFSERVING_STATUS
from servekit.serving.protocols.http import error_response
from servekit.testing.app_client import app_client

INFERENCE = "inference-token-0123456789"
ADMIN = "admin-token-0123456789abcd"
BOTH = "both-token-0123456789abcdef"
ROW = [5.9, 3.0, 4.2, 1.5]
V2_BODY = {"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32", "data": ROW}]}


@pytest.fixture(scope="module")
def authed(demo_config: ServerConfig) -> Iterator[TestClient]:
    """The demo app with tokens, called from a non-loopback address (as a client on the network)."""
    tokens = AuthTokens(frozenset({INFERENCE, BOTH}), frozenset({ADMIN, BOTH}), "test")
    with app_client(dataclasses.replace(demo_config, auth=tokens), client_address=("10.1.2.3", 40000)) as c:
        yield c


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


INFERENCE_CALLS = [
    ("/v1/models/iris:predict", {"json": {"instances": [ROW]}}),
    ("/v2/models/iris/infer", {"json": V2_BODY}),
    (
        "/invocations",
        {"json": {"instances": [ROW]}, "headers": {"X-Amzn-SageMaker-Custom-Attributes": "tfs-model-name=iris"}},
    ),
]


@pytest.mark.parametrize(("path", "kw"), INFERENCE_CALLS, ids=["tfserving", "kserve", "sagemaker"])
def test_inference_needs_an_inference_token(authed: TestClient, path: str, kw: dict[str, dict[str, object]]) -> None:
    headers = dict(kw.get("headers", {}))
    body = {k: v for k, v in kw.items() if k != "headers"}

    r = authed.post(path, headers=headers, **body)  # type: ignore[arg-type]
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == 'Bearer realm="servekit"'
    assert r.json() == {"error": "authentication required: send Authorization: Bearer <token>"}

    r = authed.post(path, headers={**headers, **bearer("not-a-token-0123456789")}, **body)  # type: ignore[arg-type]
    assert r.status_code == 401
    assert 'error="invalid_token"' in r.headers["www-authenticate"]
    assert INFERENCE not in r.text and ADMIN not in r.text

    r = authed.post(path, headers={**headers, "Authorization": f"Basic {INFERENCE}"}, **body)  # type: ignore[arg-type]
    assert r.status_code == 401  # only the Bearer scheme counts

    r = authed.post(path, headers={**headers, **bearer(ADMIN)}, **body)  # type: ignore[arg-type]
    assert r.status_code == 403
    assert 'error="insufficient_scope"' in r.headers["www-authenticate"]

    for token in (INFERENCE, BOTH):
        r = authed.post(path, headers={**headers, **bearer(token)}, **body)  # type: ignore[arg-type]
        assert r.status_code == 200, r.text


@pytest.mark.parametrize(
    "path",
    [
        "/metrics",
        "/monitoring/prometheus/metrics",
        "/v1/models/iris",
        "/v1/models/iris/metadata",
        "/v2/models/iris",
        "/v2",
        "/no/such/route",
    ],
)
def test_status_metadata_and_metrics_need_an_admin_token(authed: TestClient, path: str) -> None:
    assert authed.get(path).status_code == 401
    assert authed.get(path, headers=bearer(INFERENCE)).status_code == 403
    expected = 404 if path == "/no/such/route" else 200
    assert authed.get(path, headers=bearer(ADMIN)).status_code == expected
    assert authed.get(path, headers=bearer(BOTH)).status_code == expected


@pytest.mark.parametrize("path", ["/v2/health/live", "/v2/health/ready", "/ping"])
def test_health_checks_need_no_token(authed: TestClient, path: str) -> None:
    assert authed.get(path).status_code == 200


def test_an_authenticated_caller_off_loopback_is_told_which_models_exist(authed: TestClient) -> None:
    r = authed.post("/v1/models/nope:predict", json={"instances": [ROW]}, headers=bearer(INFERENCE))
    assert r.status_code == 404
    assert "iris" in r.json()["error"]


def test_without_tokens_everything_is_open(client: TestClient) -> None:
    assert client.get("/metrics").status_code == 200
    assert client.post("/v1/models/iris:predict", json={"instances": [ROW]}).status_code == 200


# ---- Retry-After ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("table", [TFSERVING_STATUS, KSERVE_STATUS, SAGEMAKER_STATUS], ids=["tf", "kserve", "sm"])
def test_every_503_and_504_error_carries_retry_after(table: object) -> None:
    for code in ErrorCode:
        response = error_response(ServekitError(code, "x"), table)  # type: ignore[arg-type]
        if response.status_code in (429, 503, 504):
            assert response.headers["retry-after"] == "1", code
        else:
            assert "retry-after" not in response.headers, code
    assert error_response(ServekitError(ErrorCode.UNAVAILABLE, "x"), table).status_code == 503  # type: ignore[arg-type]
    assert error_response(ServekitError(ErrorCode.DEADLINE_EXCEEDED, "x"), table).status_code == 504  # type: ignore[arg-type]


def test_unavailable_model_and_sagemaker_ping_answer_503_with_retry_after(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()  # a configured model with no version yet
    config = ServerConfig(
        models=(ModelConfig(name="m", base_path=str(tmp_path / "m")),), file_system_poll_wait_seconds=0
    )
    with app_client(config) as c:
        ping = c.get("/ping")
        assert (ping.status_code, ping.headers.get("retry-after")) == (503, "1")
        r = c.post("/v1/models/m:predict", json={"instances": [[1.0]]})
        assert (r.status_code, r.headers.get("retry-after")) == (503, "1")
