"""SigV4 verification against requests real botocore signed, with an injected clock."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials

from servekit.aws import ApiError, Credentials
from servekit.aws.credentials import AccessKey
from servekit.aws.sigv4 import AMZ_DATE, Verifier, canonical_request, parse_authorization, verify_s3

URL = "http://127.0.0.1:8765"


def botocore_signed(
    key: AccessKey, method: str = "POST", path: str = "/", body: bytes = b"{}", service: str = "sagemaker",
    headers: dict[str, str] | None = None,
) -> tuple[AWSRequest, SigV4Auth]:  # fmt: skip
    req = AWSRequest(method, URL + path, data=body, headers=headers or {"Content-Type": "application/x-amz-json-1.1"})
    auth = SigV4Auth(BotoCredentials(key.access_key_id, key.secret_access_key), service, "eu-west-1")
    auth.add_auth(req)
    return req, auth


def wire(req: AWSRequest) -> tuple[str, str, dict[str, str], bytes]:
    path = req.url[len(URL) :]
    headers = dict(req.headers.items())
    headers["Host"] = "127.0.0.1:8765"
    body = req.data if isinstance(req.data, bytes) else (req.data or "").encode()
    return req.method, path, headers, body


def signed_at(req: AWSRequest) -> float:
    return datetime.strptime(req.headers["X-Amz-Date"], AMZ_DATE).replace(tzinfo=UTC).timestamp()


@pytest.fixture
def creds(tmp_path: Path) -> Credentials:
    return Credentials.load_or_create(tmp_path)


def verifier(creds: Credentials, req: AWSRequest, offset_s: float = 0.0) -> Verifier:
    at = signed_at(req) + offset_s
    return Verifier(creds, clock=lambda: at)


def _code(exc: pytest.ExceptionInfo[ApiError]) -> tuple[str, int | None]:
    return exc.value.code, exc.value.status


@pytest.mark.parametrize(
    ("method", "path", "headers"),
    [
        ("POST", "/", {"Content-Type": "application/x-amz-json-1.1", "X-Amz-Target": "SageMaker.ListEndpoints"}),
        ("POST", "/endpoints/my%20ep/invocations", {"X-Amzn-SageMaker-Custom-Attributes": "a  c"}),
        ("GET", "/a/./b/../c/?b=2&a=1&a=0&sp=x%20y", {"Accept": "  text/plain  "}),
        ("POST", "/endpoints/ep~1/invocations", {"X-Amzn-SageMaker-Target-Variant": "v1"}),
    ],
)  # fmt: skip
def test_canonical_request_is_botocores(creds: Credentials, method: str, path: str, headers: dict[str, str]) -> None:
    req, auth = botocore_signed(creds.admin, method, path, b"1,2", headers=headers)
    m, p, h, body = wire(req)
    ours = canonical_request(
        m, p, {k.lower(): v for k, v in h.items()}, parse_authorization(h["Authorization"]).signed_headers,
        auth.payload(req),
    )  # fmt: skip
    signature = req.headers["Authorization"]
    del req.headers["Authorization"]  # botocore builds its canonical request before adding it
    assert ours == auth.canonical_request(req)
    req.headers["Authorization"] = signature
    assert verifier(creds, req).verify(m, p, h, body, "sagemaker").access_key_id == creds.admin.access_key_id


def test_clock_skew_up_to_fifteen_minutes(creds: Credentials) -> None:
    req, _ = botocore_signed(creds.admin)
    args = wire(req)
    verifier(creds, req, 14 * 60).verify(*args, "sagemaker")
    verifier(creds, req, -14 * 60).verify(*args, "sagemaker")
    with pytest.raises(ApiError) as late:
        verifier(creds, req, 16 * 60).verify(*args, "sagemaker")
    assert _code(late) == ("InvalidSignatureException", 403)
    assert late.value.message.startswith(f"Signature expired: {req.headers['X-Amz-Date']} is now earlier than ")
    assert late.value.message.endswith(" - 15 min.)")
    with pytest.raises(ApiError) as early:
        verifier(creds, req, -16 * 60).verify(*args, "sagemaker")
    assert early.value.message.startswith("Signature not yet current: ")


def test_tampering_is_caught(creds: Credentials) -> None:
    req, _ = botocore_signed(creds.admin, headers={"X-Amz-Target": "SageMaker.ListEndpoints"})
    method, path, headers, body = wire(req)
    v = verifier(creds, req)
    v.verify(method, path, {**headers, "X-Unsigned-Extra": "fine"}, body, "sagemaker")
    for changed in (
        (method, path, headers, b'{"MaxResults": 1}'),
        (method, path, {**headers, "X-Amz-Target": "SageMaker.DeleteEndpoint"}, body),
        (method, "/other", headers, body),
        ("PUT", path, headers, body),
    ):
        with pytest.raises(ApiError) as e:
            v.verify(*changed, "sagemaker")
        assert _code(e) == ("InvalidSignatureException", 403)
        assert "The Canonical String for this request should have been" in e.value.message
        assert creds.admin.secret_access_key not in e.value.message


def test_wrong_secret_unknown_key_wrong_service(creds: Credentials) -> None:
    forged = AccessKey(creds.admin.access_key_id, "x" * 40)
    req, _ = botocore_signed(forged)
    with pytest.raises(ApiError) as e:
        verifier(creds, req).verify(*wire(req), "sagemaker")
    assert e.value.message.startswith("The request signature we calculated does not match")

    stranger = AccessKey("AKIASTRANGER00000000", creds.admin.secret_access_key)
    req, _ = botocore_signed(stranger)
    with pytest.raises(ApiError) as e:
        verifier(creds, req).verify(*wire(req), "sagemaker", unrecognized_status=400)
    assert _code(e) == ("UnrecognizedClientException", 400)

    req, _ = botocore_signed(creds.admin, service="monitoring")
    with pytest.raises(ApiError) as e:
        verifier(creds, req).verify(*wire(req), "sagemaker")
    assert _code(e) == ("InvalidSignatureException", 403)
    assert e.value.message == "Credential should be scoped to correct service: 'sagemaker'. "


def test_missing_and_malformed_authorization(creds: Credentials) -> None:
    req, _ = botocore_signed(creds.admin)
    method, path, headers, body = wire(req)
    v = verifier(creds, req)
    no_auth = {k: val for k, val in headers.items() if k != "Authorization"}
    with pytest.raises(ApiError) as e:
        v.verify(method, path, no_auth, body, "sagemaker")
    assert _code(e) == ("MissingAuthenticationTokenException", 403)
    assert e.value.message == "Missing Authentication Token"

    for bad, fragment in (
        ("AWS4-HMAC-SHA256 Credential=AK/20240101/us-east-1/sagemaker/aws4_request", "requires 'Signature'"),
        ("AWS4-HMAC-SHA1 Credential=a, SignedHeaders=host, Signature=00", "Unsupported AWS 'algorithm'"),
        ("AWS4-HMAC-SHA256 Credential=AK/x, SignedHeaders=host, Signature=00", "Credential should be scoped"),
    ):
        with pytest.raises(ApiError) as e:
            v.verify(method, path, {**headers, "Authorization": bad}, body, "sagemaker")
        assert e.value.code == "IncompleteSignatureException"
        assert fragment in e.value.message

    no_date = {k: val for k, val in headers.items() if k != "X-Amz-Date"}
    with pytest.raises(ApiError) as e:
        v.verify(method, path, no_date, body, "sagemaker")
    assert "requires existence of either a 'X-Amz-Date' or a 'Date' header" in e.value.message


def test_host_must_be_signed_and_scope_date_must_match(creds: Credentials) -> None:
    req, _ = botocore_signed(creds.admin)
    method, path, headers, body = wire(req)
    v = verifier(creds, req)
    auth = headers["Authorization"]
    with pytest.raises(ApiError) as e:
        v.verify(method, path, {**headers, "Authorization": auth.replace("SignedHeaders=", "SignedHeaders=x;")
                                .replace(";host;", ";")}, body, "sagemaker")  # fmt: skip
    assert "'Host' or ':authority' must be a 'SignedHeader'" in e.value.message
    date = headers["X-Amz-Date"][:8]
    with pytest.raises(ApiError) as e:
        v.verify(method, path, {**headers, "Authorization": auth.replace(f"/{date}/", "/19990101/")}, body, "sagemaker")
    assert e.value.message.startswith("Date in Credential scope does not match YYYYMMDD")


def test_content_sha256_header_must_match_the_body(creds: Credentials) -> None:
    req, _ = botocore_signed(creds.admin)
    method, path, headers, body = wire(req)
    with pytest.raises(ApiError) as e:
        verifier(creds, req).verify(method, path, {**headers, "x-amz-content-sha256": "0" * 64}, body, "sagemaker")
    assert "x-amz-content-sha256" in e.value.message


def test_a_signature_for_another_region_is_refused_where_the_region_is_known(creds: Credentials) -> None:
    """servekit up answers for one region: a request botocore signed for eu-west-1 is refused by a plane serving
    us-east-1, as a regional AWS endpoint refuses it (a verifier told no region accepts any, as before)."""
    req, _ = botocore_signed(creds.admin)  # scoped to eu-west-1
    at = signed_at(req)
    assert Verifier(creds, clock=lambda: at, region="eu-west-1").verify(*wire(req), "sagemaker") == creds.admin
    assert Verifier(creds, clock=lambda: at).verify(*wire(req), "sagemaker") == creds.admin
    with pytest.raises(ApiError) as e:
        Verifier(creds, clock=lambda: at, region="us-east-1").verify(*wire(req), "sagemaker")
    assert _code(e) == ("InvalidSignatureException", 403)
    assert "answers for 'us-east-1', not 'eu-west-1'" in e.value.message
    s3_req, _ = botocore_signed(creds.admin, method="GET", path="/bucket/key", body=b"", service="s3")
    s3_req.headers["x-amz-content-sha256"] = hashlib.sha256(b"").hexdigest()
    method, path, headers, _ = wire(s3_req)
    with pytest.raises(ApiError) as e:
        verify_s3(Verifier(creds, clock=lambda: at, region="us-east-1"), method, path, headers)
    assert _code(e) == ("AuthorizationHeaderMalformed", 400)
    assert "the region 'eu-west-1' is wrong; expecting 'us-east-1'" in e.value.message
