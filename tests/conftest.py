from __future__ import annotations

import os

# Tests and benchmarks send traffic to loopback only. Ray resolves 127.0.0.1 to the machine's routable address (and
# its servers then listen on every interface) unless this says it runs no cluster beyond the machine; set before any
# test imports Ray, so a local Ray that servekit starts in a test (the Ray engines, the Ray backend without an
# address) and every process those start run on 127.0.0.1 alone. The two-node cluster of tests/e2e/test_ray_backend.py
# sets it for its nodes too.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from servekit.aws import AccessKey, Api, ApiError, Call, Credentials
from servekit.aws.errors import model_error, service_unavailable, validation_exception
from servekit.config.loading import load_model_config_file
from servekit.config.models import ServerConfig
from servekit.testing.app_client import LOOPBACK, serving_app, wait_until_loaded
from servekit.testing.aws import in_process_client
from servekit.tools.demo.build import build_demo


@pytest.fixture(scope="session")
def demo_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo model repository (iris ONNX v1+v2, iris_sklearn, diabetes, iris_handler), built once."""
    base = tmp_path_factory.mktemp("demo-models")
    build_demo(base)
    return base


def wait_ready(client: TestClient) -> None:
    """Every configured version has loaded (or failed): waits on the manager, not on a clock."""
    wait_until_loaded(client)


@pytest.fixture(scope="session")
def demo_config(demo_repo: Path) -> ServerConfig:
    models = load_model_config_file(demo_repo / "models.config")
    return ServerConfig(models=models, file_system_poll_wait_seconds=0, max_request_bytes=1_000_000)


@pytest.fixture(scope="module")
def client(demo_config: ServerConfig) -> Iterator[TestClient]:
    """The whole app in process, every demo model loaded."""
    app = serving_app(demo_config)
    with TestClient(app, raise_server_exceptions=False, client=LOOPBACK) as c:
        wait_ready(c)
        yield c


# ---- the AWS services' wire layer, in process (a fake hosting domain behind real botocore clients) ----
class FakeHosting:
    """A stand-in for the domain layer: just enough endpoints to see the wire layer from boto3's side."""

    def __init__(self) -> None:
        self.endpoints: dict[str, dict[str, Any]] = {}
        self.calls: list[Call] = []

    def __call__(self, call: Call) -> Mapping[str, Any] | None:
        self.calls.append(call)
        handler = getattr(self, call.operation, None)
        if handler is None:
            return {}
        result: Mapping[str, Any] | None = handler(call.params)
        return result

    def CreateEndpoint(self, p: dict[str, Any]) -> dict[str, Any]:
        from datetime import UTC, datetime

        arn = f"arn:aws:sagemaker:us-east-1:000000000000:endpoint/{p['EndpointName'].lower()}"
        now = datetime.now(UTC)
        self.endpoints[p["EndpointName"]] = {
            "EndpointName": p["EndpointName"],
            "EndpointArn": arn,
            "EndpointConfigName": p["EndpointConfigName"],
            "EndpointStatus": "InService",
            "CreationTime": now,
            "LastModifiedTime": now,
        }
        return {"EndpointArn": arn}

    def _endpoint(self, name: str) -> dict[str, Any]:
        if name not in self.endpoints:
            raise validation_exception(f'Could not find endpoint "{name}".')
        return self.endpoints[name]

    def DescribeEndpoint(self, p: dict[str, Any]) -> dict[str, Any]:
        return self._endpoint(p["EndpointName"])

    def DeleteEndpoint(self, p: dict[str, Any]) -> dict[str, Any]:
        self._endpoint(p["EndpointName"])
        del self.endpoints[p["EndpointName"]]
        return {}

    def InvokeEndpoint(self, p: dict[str, Any]) -> dict[str, Any]:
        self._runtime_endpoint(p["EndpointName"])
        if p["Body"] == b"fail":
            raise model_error(
                'Received client error (422) from primary with message "bad input". See the logs.',
                422,
                "bad input",
                "arn:aws:logs:us-east-1:000000000000:log-group:/aws/sagemaker/Endpoints/x",
            )
        return {
            "Body": p["Body"][::-1],
            "ContentType": p.get("Accept", "application/octet-stream"),
            "InvokedProductionVariant": "AllTraffic",
            "CustomAttributes": p.get("CustomAttributes"),
        }

    def _runtime_endpoint(self, name: str) -> None:
        if name == "down":
            raise service_unavailable("No healthy instance for endpoint down.")
        if name not in self.endpoints:
            raise ApiError(
                "ValidationError", f"Endpoint {name} of account 000000000000 not found.", 400,
                {"ErrorCode": "NO_SUCH_ENDPOINT"},
            )  # fmt: skip


@pytest.fixture
def api_home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def api_keys(api_home: Path) -> Credentials:
    return Credentials.load_or_create(api_home)


@pytest.fixture
def fake_hosting() -> FakeHosting:
    return FakeHosting()


@pytest.fixture
def wire_api(api_keys: Credentials) -> Api:
    return Api(api_keys, strict_output=True)


@pytest.fixture
def boto_client(wire_api: Api, fake_hosting: FakeHosting) -> Callable[..., Any]:
    def make(
        service: str, key: AccessKey | None = None, dispatch: Any = None, via: Api | None = None, config: Any = None
    ) -> Any:
        return in_process_client(via or wire_api, service, key, dispatch or fake_hosting, config)

    return make
