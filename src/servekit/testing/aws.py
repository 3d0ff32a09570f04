"""botocore clients wired to the AWS wire layer in process, for tests of every service on ``servekit up``.

botocore builds, serializes and signs each request exactly as it would for AWS; a ``before-send`` hook hands the
prepared request (method, raw path, headers plus the Host header the socket would add, body) to
:class:`servekit.aws.Api` and gives botocore its response to parse. No socket, no thread.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

import boto3
import botocore.session
from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.config import Config

from servekit.aws import AccessKey, Api, Call

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
        aws_session_token=key.session_token if key else None,  # a role session's key carries its token
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


def asgi_client(
    app: Any, service: str, key: AccessKey | None, config: Config | None = None, endpoint_url: str = ENDPOINT_URL
) -> Any:
    """A boto3 client (its transfer manager included) whose requests an ASGI app answers in process (S3's and STS's
    own fronts): each request runs through the app in a fresh event loop, its body in one message. No socket, no
    server thread."""
    client = boto3.session.Session().client(
        service,
        endpoint_url=endpoint_url,  # https:// makes botocore send S3 bodies aws-chunked, as it does to AWS
        region_name="us-east-1",
        aws_access_key_id=key.access_key_id if key else "AKIAUNKNOWN000000000",
        aws_secret_access_key=key.secret_access_key if key else "not-a-secret",
        aws_session_token=key.session_token if key else None,  # a role session's key carries its token
        config=Config(retries={"total_max_attempts": 1}).merge(config or Config()),
    )

    def send(request: AWSPreparedRequest, **_: Any) -> AWSResponse:
        method, raw_path, headers, body = wire_request(request)
        status, out_headers, out_body = asgi_call(app, method, raw_path, headers, body)
        return AWSResponse(request.url, status, out_headers, _Raw(out_body))

    client.meta.events.register("before-send", send)
    return client


def asgi_call(
    app: Any, method: str, raw_path: str, headers: Mapping[str, str], body: bytes
) -> tuple[int, dict[str, str], bytes]:
    """One HTTP request through an ASGI app: its status, headers and whole body."""
    path, _, query = raw_path.partition("?")
    scope = {
        "type": "http",
        "method": method,
        "path": unquote(path),
        "raw_path": path.encode("latin-1"),
        "query_string": query.encode("latin-1"),
        "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()],
    }
    sent = False
    started: dict[str, Any] = {}
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            started.update(message)
        else:
            chunks.append(message.get("body", b""))

    asyncio.run(app(scope, receive, send))
    out_headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in started.get("headers", [])}
    return int(started["status"]), out_headers, b"".join(chunks)
