"""Real botocore clients wired to the wire layer in process.

botocore builds, serializes and signs each request exactly as it would for AWS; a ``before-send`` hook hands the
prepared request (method, raw path, headers plus the Host header the socket would add, body) to
:class:`servekit.control.api.Api` and gives botocore its response to parse. No socket, no thread.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import botocore.session
import pytest
from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.config import Config

from servekit.control.api import AccessKey, Api, ApiError, Call, Credentials
from servekit.control.api.errors import model_error, service_unavailable, validation_exception

ENDPOINT_URL = "http://127.0.0.1:8765"


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._buf = io.BytesIO(body)

    def read(self, amt: int | None = None, **_: Any) -> bytes:
        return self._buf.read() if amt is None else self._buf.read(amt)

    def stream(self, **_: Any) -> Any:
        yield self._buf.read()

    def close(self) -> None:
        pass


def wire_request(request: AWSPreparedRequest) -> tuple[str, str, dict[str, str], bytes]:
    """What a server would read off the socket for a prepared botocore request."""
    parts = urlsplit(request.url)
    raw_path = parts.path + (f"?{parts.query}" if parts.query else "")
    headers = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in request.headers.items()}
    headers.setdefault("Host", parts.netloc)
    body = request.body or b""
    if isinstance(body, str):
        body = body.encode()
    elif not isinstance(body, bytes):
        body = body.read()
    return request.method, raw_path, headers, body


def in_process_client(
    wire_api: Api,
    service: str,
    key: AccessKey | None,
    dispatch: Callable[[Call], Mapping[str, Any] | None],
    config: Config | None = None,
) -> Any:
    session = botocore.session.get_session()
    client = session.create_client(
        service,
        endpoint_url=ENDPOINT_URL,
        region_name="us-east-1",
        aws_access_key_id=key.access_key_id if key else "AKIAUNKNOWN000000000",
        aws_secret_access_key=key.secret_access_key if key else "not-a-secret",
        config=Config(retries={"total_max_attempts": 1}).merge(config or Config()),
    )
    client.sent = []

    def send(request: AWSPreparedRequest, **_: Any) -> AWSResponse:
        method, raw_path, headers, body = wire_request(request)
        client.sent.append((method, raw_path, headers, body))
        response = wire_api.handle(method, raw_path, headers, body, dispatch)
        assert response is not None, f"no service routed {method} {raw_path}"
        client.last_response = response
        return AWSResponse(request.url, response.status, response.headers, _Raw(response.body))

    client.meta.events.register("before-send", send)
    return client


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
