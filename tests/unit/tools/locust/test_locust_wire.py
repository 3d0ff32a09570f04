"""servekit.tools.locust.wire without Locust: the environment servekit env sets, InvokeEndpoint's signed headers
(checked by servekit up's own SigV4 verifier and by botocore's signer), readable names and SageMaker's error codes."""

from __future__ import annotations

import sys

import orjson
import pytest

from servekit.aws.credentials import AccessKey
from servekit.aws.errors import ApiError
from servekit.aws.sigv4 import Verifier
from servekit.errors import ConfigError
from servekit.tools.locust import wire

NOW = 1_760_000_000.0
KEY = AccessKey("AKIDLOCUST", "s3cr3t/+key")


class _Keys:
    def lookup(self, access_key_id: str) -> AccessKey | None:
        return KEY if access_key_id == KEY.access_key_id else None


def test_importing_the_package_does_not_import_locust() -> None:
    before = "locust" in sys.modules
    import servekit.tools.locust
    import servekit.tools.locust.steps
    import servekit.tools.locust.wire

    assert servekit.tools.locust.steps.knee_from_history is servekit.tools.locust.knee_from_history
    if not before:  # Locust patches the standard library with gevent's on import: never as a side effect here
        assert "locust" not in sys.modules and "servekit.tools.locust.users" not in sys.modules
    with pytest.raises(AttributeError):
        _ = servekit.tools.locust.NoSuchUser


def test_url_and_keys_come_from_servekit_env() -> None:
    env = {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:8080/",
        "AWS_ACCESS_KEY_ID": "AK",
        "AWS_SECRET_ACCESS_KEY": "SK",
        "AWS_DEFAULT_REGION": "eu-west-1",
    }
    assert wire.endpoint_url(env) == "http://127.0.0.1:8080"
    assert wire.keys_from_env(env) == wire.Keys("AK", "SK", "eu-west-1")
    assert wire.endpoint_url({"AWS_DEFAULT_REGION": "eu-west-1"}) == "https://runtime.sagemaker.eu-west-1.amazonaws.com"
    assert wire.endpoint_url({}) is None
    with pytest.raises(ConfigError, match="servekit env"):
        wire.keys_from_env({"AWS_ACCESS_KEY_ID": "AK"})


def test_host_header_keeps_only_a_non_default_port() -> None:
    assert wire.authority("http://127.0.0.1:8080") == "127.0.0.1:8080"
    assert wire.authority("https://runtime.sagemaker.us-east-1.amazonaws.com") == (
        "runtime.sagemaker.us-east-1.amazonaws.com"
    )
    assert wire.authority("http://[::1]:80") == "[::1]"


def test_signed_invoke_verifies_with_servekit_ups_verifier() -> None:
    body = wire.encode_body({"request_id": "r1", "x": [1.5]})
    keys = wire.Keys(KEY.access_key_id, KEY.secret_access_key)
    path, headers = wire.signed_invoke(
        "credit", "127.0.0.1:8080", body, keys, now=NOW, target_model="m1.tar.gz", target_variant="A"
    )
    assert path == "/endpoints/credit/invocations"
    assert headers["X-Amzn-SageMaker-Target-Model"] == "m1.tar.gz"
    assert headers["X-Amz-Date"] == "20251009T085320Z"
    verifier = Verifier(_Keys(), clock=lambda: NOW)
    assert verifier.verify("POST", path, headers, body, "sagemaker") == KEY
    with pytest.raises(ApiError) as err:  # one byte of the body changed: the signature no longer holds
        verifier.verify("POST", path, headers, body + b" ", "sagemaker")
    assert err.value.code == "InvalidSignatureException"
    tampered = {**headers, "X-Amzn-SageMaker-Target-Model": "m2.tar.gz"}
    with pytest.raises(ApiError):
        verifier.verify("POST", path, tampered, body, "sagemaker")


def test_signature_equals_botocores() -> None:
    from unittest import mock

    import botocore.auth
    import botocore.credentials
    from botocore.awsrequest import AWSRequest

    body = b'{"x": 1}'
    keys = wire.Keys(KEY.access_key_id, KEY.secret_access_key, "us-east-1")
    path, ours = wire.signed_invoke("credit", "127.0.0.1:8080", body, keys, now=NOW, accept="application/json")
    request = AWSRequest(
        "POST",
        f"http://127.0.0.1:8080{path}",
        data=body,
        headers={"Content-Type": "application/json", "Accept": "application/json", "Host": "127.0.0.1:8080"},
    )
    creds = botocore.credentials.Credentials(KEY.access_key_id, KEY.secret_access_key)
    import datetime as dt

    fixed = dt.datetime.fromtimestamp(NOW, dt.UTC).replace(tzinfo=None)
    with mock.patch.object(botocore.auth, "get_current_datetime", return_value=fixed):
        botocore.auth.SigV4Auth(creds, "sagemaker", "us-east-1").add_auth(request)
    assert request.headers["X-Amz-Date"] == ours["X-Amz-Date"]
    theirs = request.headers["Authorization"]
    assert theirs.rsplit("Signature=", 1)[1] == ours["Authorization"].rsplit("Signature=", 1)[1]


def test_request_names_read_as_the_call() -> None:
    assert wire.request_name("credit") == "InvokeEndpoint credit"
    assert wire.request_name("credit", "m1.tar.gz", "A") == "InvokeEndpoint credit [model=m1.tar.gz] [variant=A]"


@pytest.mark.parametrize(
    ("status", "headers", "body", "code"),
    [
        (424, {}, orjson.dumps({"__type": "ModelError", "message": "boom"}), "ModelError"),
        (400, {"x-amzn-ErrorType": "ValidationError:http://internal"}, b"{}", "ValidationError"),
        (429, {}, orjson.dumps({"__type": "com.amazon#ThrottlingException", "message": "slow"}), "ThrottlingException"),
        (
            403,
            {},
            orjson.dumps({"__type": "UnrecognizedClientException", "message": "bad"}),
            "UnrecognizedClientException",
        ),
        (502, {}, b"<html>bad gateway</html>", "HTTP502"),
    ],
)
def test_error_codes(status: int, headers: dict[str, str], body: bytes, code: str) -> None:
    got, message = wire.error_of(status, headers, body)
    assert got == code
    assert wire.failure_text(status, got, message).startswith(f"{status} {code}")


def test_bodies_encode_bytes_text_and_json() -> None:
    assert wire.encode_body(b"a,b") == b"a,b"
    assert wire.encode_body("é") == "é".encode()
    assert orjson.loads(wire.encode_body({"a": [1]})) == {"a": [1]}
