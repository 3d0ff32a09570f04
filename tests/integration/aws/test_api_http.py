"""The wire layer behind a real HTTP server on 127.0.0.1, called by boto3 over sockets."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from servekit.aws import Api, Call, Credentials, client
from servekit.aws.errors import model_error, validation_error, validation_exception

NO_RETRY = Config(retries={"total_max_attempts": 1})


class Endpoints:
    """A minimal domain: endpoints that are InService as soon as they are created."""

    def __init__(self) -> None:
        self.items: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()

    def __call__(self, call: Call) -> Mapping[str, Any] | None:
        p = call.params
        with self.lock:
            if call.operation == "CreateEndpoint":
                now = datetime.now(UTC)
                arn = f"arn:aws:sagemaker:us-east-1:000000000000:endpoint/{p['EndpointName'].lower()}"
                self.items[p["EndpointName"]] = {
                    "EndpointName": p["EndpointName"], "EndpointArn": arn, "EndpointStatus": "InService",
                    "EndpointConfigName": p["EndpointConfigName"], "CreationTime": now, "LastModifiedTime": now,
                }  # fmt: skip
                return {"EndpointArn": arn}
            if call.operation in ("DescribeEndpoint", "DeleteEndpoint"):
                found = self.items.get(p["EndpointName"])
                if found is None:
                    raise validation_exception(f'Could not find endpoint "{p["EndpointName"]}".')
                if call.operation == "DeleteEndpoint":
                    del self.items[p["EndpointName"]]
                    return {}
                return found
            if call.operation == "InvokeEndpoint":
                if p["EndpointName"] not in self.items:
                    raise validation_error(f"Endpoint {p['EndpointName']} of account 000000000000 not found.")
                if p["Body"].startswith(b"boom"):
                    raise model_error('Received server error (500) from primary with message "boom".', 500, "boom")
                return {
                    "Body": p["Body"].upper(),
                    "ContentType": "text/plain",
                    "InvokedProductionVariant": "AllTraffic",
                }
        raise AssertionError(f"unexpected {call.operation}")


@pytest.fixture
def api_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    home = tmp_path / "home"
    api = Api(Credentials.load_or_create(home), strict_output=True)
    domain = Endpoints()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            response = api.handle(self.command, self.path, dict(self.headers.items()), body, domain)
            if response is None:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(response.status)
            for name, value in response.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(response.body)))
            self.end_headers()
            self.wfile.write(response.body)

        do_GET = do_POST = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", home
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_lifecycle_with_waiters_over_http(api_server: tuple[str, Path]) -> None:
    url, home = api_server
    sm = client(home, "sagemaker", url, config=NO_RETRY)
    sm.create_endpoint(EndpointName="ep", EndpointConfigName="cfg")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig={"Delay": 0, "MaxAttempts": 1})
    assert sm.describe_endpoint(EndpointName="ep")["EndpointStatus"] == "InService"
    sm.delete_endpoint(EndpointName="ep")
    sm.get_waiter("endpoint_deleted").wait(EndpointName="ep", WaiterConfig={"Delay": 0, "MaxAttempts": 1})
    with pytest.raises(ClientError) as e:
        sm.create_endpoint(EndpointName="bad name!", EndpointConfigName="cfg")
    assert e.value.response["Error"]["Code"] == "ValidationException"
    assert e.value.response["Error"]["Message"].startswith(
        "1 validation error detected: Value 'bad name!' at 'endpointName' failed to satisfy constraint: Member must "
        "satisfy regular expression pattern: "
    )


def test_runtime_over_http_with_boto3_and_the_homes_keys(api_server: tuple[str, Path]) -> None:
    url, home = api_server
    creds = Credentials.load(home)
    invoker = creds.add_key("invoke", "app")
    client(home, "sagemaker", url, config=NO_RETRY).create_endpoint(EndpointName="ep", EndpointConfigName="cfg")
    rt = boto3.client(
        "sagemaker-runtime", endpoint_url=url, region_name="eu-central-1", config=NO_RETRY,
        aws_access_key_id=invoker.access_key_id, aws_secret_access_key=invoker.secret_access_key,
    )  # fmt: skip
    out = rt.invoke_endpoint(EndpointName="ep", Body=b"hello" * 1000, ContentType="text/plain")
    assert out["Body"].read() == b"HELLO" * 1000
    assert out["InvokedProductionVariant"] == "AllTraffic"
    with pytest.raises(rt.exceptions.ModelError) as e:
        rt.invoke_endpoint(EndpointName="ep", Body=b"boom")
    assert e.value.response["OriginalStatusCode"] == 500
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 424
    with pytest.raises(rt.exceptions.ValidationError):
        rt.invoke_endpoint(EndpointName="missing", Body=b"x")
    # the invoke-only key cannot manage endpoints
    sm = boto3.client(
        "sagemaker", endpoint_url=url, region_name="eu-central-1", config=NO_RETRY,
        aws_access_key_id=invoker.access_key_id, aws_secret_access_key=invoker.secret_access_key,
    )  # fmt: skip
    with pytest.raises(ClientError) as denied:
        sm.delete_endpoint(EndpointName="ep")
    assert denied.value.response["Error"]["Code"] == "AccessDeniedException"


@pytest.mark.parametrize("service", ["sagemaker", "sagemaker-runtime"])
def test_wrong_secret_over_http(api_server: tuple[str, Path], service: str) -> None:
    url, home = api_server
    admin = Credentials.load(home).admin
    c = boto3.client(
        service, endpoint_url=url, region_name="us-east-1", config=NO_RETRY,
        aws_access_key_id=admin.access_key_id, aws_secret_access_key=admin.secret_access_key[::-1],
    )  # fmt: skip
    with pytest.raises(ClientError) as e:
        if service == "sagemaker":
            c.list_endpoints()
        else:
            c.invoke_endpoint(EndpointName="ep", Body=b"x")
    assert e.value.response["Error"]["Code"] == "InvalidSignatureException"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
