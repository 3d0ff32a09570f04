"""Fixtures for unit tests of the AWS services: a wire API with fresh keys, and real botocore clients sending to it
in process (:func:`servekit.testing.aws.in_process_client`) with a fake hosting domain behind."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from servekit.aws import AccessKey, Api, ApiError, Call, Credentials
from servekit.aws.errors import model_error, service_unavailable, validation_exception
from servekit.testing.aws import in_process_client


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
