"""AWS Signature Version 4 verification of incoming requests, as botocore signs them.

The canonical request is built exactly as ``botocore.auth.SigV4Auth`` builds it (and the tests check it
against requests real botocore clients signed): the path as sent, dot segments removed, percent-encoded once
more (``safe='/~'``); query pairs encoded and sorted; the signed headers lower-cased, sorted, whitespace
collapsed; the SHA-256 of the body. Failures answer the codes and messages the AWS front ends use.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Protocol
from urllib.parse import parse_qsl, quote, urlsplit

from servekit.aws.credentials import AccessKey
from servekit.aws.errors import ApiError

ALGORITHM = "AWS4-HMAC-SHA256"
AMZ_DATE = "%Y%m%dT%H%M%SZ"
MAX_SKEW_S = 15 * 60

_MISMATCH = (
    "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access "
    "Key and signing method. Consult the service documentation for details."
)


class LowerCaseHeaders(dict[str, str]):
    """Request headers whose names are lower-case already (ASGI's are): the protocol layers, which look headers
    up by lower-case name, use such a mapping as it is instead of building a lower-cased copy each time."""


def lowered(headers: Mapping[str, str]) -> Mapping[str, str]:
    """``headers`` with lower-case names (itself when it is a :class:`LowerCaseHeaders`)."""
    if isinstance(headers, LowerCaseHeaders):
        return headers
    return {k.lower(): v for k, v in headers.items()}


class KeyLookup(Protocol):
    def lookup(self, access_key_id: str) -> AccessKey | None: ...


def missing_token() -> ApiError:
    return ApiError("MissingAuthenticationTokenException", "Missing Authentication Token", 403)


def incomplete(message: str) -> ApiError:
    return ApiError("IncompleteSignatureException", message, 400)


def invalid_signature(message: str) -> ApiError:
    return ApiError("InvalidSignatureException", message, 403)


def unrecognized_client(status: int) -> ApiError:
    return ApiError("UnrecognizedClientException", "The security token included in the request is invalid.", status)


@dataclass(frozen=True)
class Authorization:
    """The parts of an ``Authorization: AWS4-HMAC-SHA256 Credential=…, SignedHeaders=…, Signature=…`` header."""

    access_key_id: str
    date: str
    region: str
    service: str
    signed_headers: tuple[str, ...]
    signature: str

    @property
    def scope(self) -> str:
        return f"{self.date}/{self.region}/{self.service}/aws4_request"


def parse_authorization(value: str) -> Authorization:
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise incomplete(f"Unsupported AWS 'algorithm': '{algorithm}'")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        name, sep, val = part.strip().partition("=")
        if sep:
            fields[name.strip()] = val.strip()
    missing = [f for f in ("Credential", "Signature", "SignedHeaders") if not fields.get(f)]
    if missing:
        raise incomplete(" ".join(f"Authorization header requires '{f}' parameter." for f in missing))
    credential = fields["Credential"].split("/")
    if len(credential) != 5 or credential[4] != "aws4_request" or not all(credential):
        raise incomplete(
            "Credential should be scoped to a valid region, service and date, in the form "
            "'<access key>/<yyyymmdd>/<region>/<service>/aws4_request'."
        )
    return Authorization(
        access_key_id=credential[0],
        date=credential[1],
        region=credential[2],
        service=credential[3],
        signed_headers=tuple(h.strip().lower() for h in fields["SignedHeaders"].split(";") if h.strip()),
        signature=fields["Signature"].lower(),
    )


def _remove_dot_segments(path: str) -> str:
    if not path:
        return "/"
    out: list[str] = []
    for segment in path.split("/"):
        if segment == ".":
            continue
        if segment == "..":
            if out:
                out.pop()
        else:
            out.append(segment)
    normalized = "/".join(out)
    if path.startswith("/") and not normalized.startswith("/"):
        normalized = "/" + normalized
    if path.endswith("/") and not normalized.endswith("/"):
        normalized += "/"
    return normalized or "/"


_PLAIN_PATH = re.compile(r"[A-Za-z0-9/_~-]*")


def canonical_uri(raw_path: str) -> str:
    if _PLAIN_PATH.fullmatch(raw_path) and "//" not in raw_path:  # the usual path: nothing to normalize or encode
        return raw_path or "/"
    return quote(_remove_dot_segments(raw_path), safe="/~")


def canonical_query(query: str) -> str:
    pairs = parse_qsl(query, keep_blank_values=True)
    encoded = sorted((quote(k, safe="-_.~"), quote(v, safe="-_.~")) for k, v in pairs)
    return "&".join(f"{k}={v}" for k, v in encoded)


def canonical_request(
    method: str, raw_path: str, headers: Mapping[str, str], signed_headers: tuple[str, ...], payload_hash: str
) -> str:
    """``headers`` lower-cased; ``raw_path`` as sent (percent-encoded), with or without its query."""
    path, _, query = raw_path.partition("?")
    if "#" in query or "#" in path:
        parts = urlsplit(raw_path)
        path, query = parts.path, parts.query
    lines = [method.upper(), canonical_uri(path), canonical_query(query) if query else ""]
    lines += [f"{name}:{' '.join(headers.get(name, '').split())}" for name in sorted(signed_headers)]
    lines += ["", ";".join(sorted(signed_headers)), payload_hash]
    return "\n".join(lines)


def string_to_sign(amz_date: str, scope: str, canonical: str) -> str:
    return "\n".join([ALGORITHM, amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])


@functools.lru_cache(maxsize=256)  # one key per (secret, day, region, service): four HMACs saved per request
def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    key = ("AWS4" + secret).encode()
    for part in (date, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def sign(secret: str, auth: Authorization, amz_date: str, canonical: str) -> str:
    key = signing_key(secret, auth.date, auth.region, auth.service)
    return hmac.new(key, string_to_sign(amz_date, auth.scope, canonical).encode(), hashlib.sha256).hexdigest()


def _request_time(headers: Mapping[str, str]) -> tuple[str, datetime]:
    """The signed timestamp as sent (ISO basic) and as a datetime."""
    text = headers.get("x-amz-date")
    if text:
        try:
            if len(text) == 16 and text[8] == "T" and text[15] == "Z" and text[:8].isdigit() and text[9:15].isdigit():
                y, mo, d, h, mi, s = (int(text[a:b]) for a, b in ((0, 4), (4, 6), (6, 8), (9, 11), (11, 13), (13, 15)))
                return text, datetime(y, mo, d, h, mi, s, tzinfo=UTC)  # strptime costs ~20 us a call
            return text, datetime.strptime(text, AMZ_DATE).replace(tzinfo=UTC)
        except ValueError:
            raise incomplete(f"Date must be in ISO-8601 'basic format'. Got '{text}'.") from None
    text = headers.get("date")
    if text:
        try:
            when = parsedate_to_datetime(text).astimezone(UTC)
        except (TypeError, ValueError, IndexError):
            raise incomplete(f"Date must be an HTTP date. Got '{text}'.") from None
        return when.strftime(AMZ_DATE), when
    raise incomplete("Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.")


class Verifier:
    """Checks SigV4 signatures against a key store, with an injectable clock (epoch seconds)."""

    def __init__(
        self,
        keys: KeyLookup,
        clock: Callable[[], float] = time.time,
        max_skew_s: float = MAX_SKEW_S,
        region: str | None = None,
    ) -> None:
        self.keys = keys
        self.clock = clock
        self.max_skew_s = max_skew_s
        self.region = region  # the one region this endpoint answers for (None: any, as a bare test server does)

    def verify(
        self,
        method: str,
        raw_path: str,
        headers: Mapping[str, str],
        body: bytes,
        service: str,
        unrecognized_status: int = 403,
    ) -> AccessKey:
        """The key that signed the request for signing name ``service``; raises :class:`ApiError` otherwise."""
        low = lowered(headers)
        header = low.get("authorization")
        if not header:
            raise missing_token()
        auth = parse_authorization(header)
        amz_date, when = _request_time(low)
        if auth.service != service:
            raise invalid_signature(f"Credential should be scoped to correct service: '{service}'. ")
        if self.region is not None and auth.region != self.region:
            raise invalid_signature(
                f"Credential should be scoped to a valid region. This endpoint answers for '{self.region}', "
                f"not '{auth.region}'. "
            )
        if auth.date != amz_date[:8]:
            raise invalid_signature(
                "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: "
                f"'{auth.date}' != '{amz_date[:8]}', from '{amz_date}'."
            )
        if "host" not in auth.signed_headers:
            raise invalid_signature("'Host' or ':authority' must be a 'SignedHeader' in the AWS Authorization.")
        self._check_clock(amz_date, when)
        key = self.keys.lookup(auth.access_key_id)
        if key is None:
            raise unrecognized_client(unrecognized_status)
        self._check_session(key, low.get("x-amz-security-token"), s3=False)
        payload_hash = hashlib.sha256(body).hexdigest()
        claimed = low.get("x-amz-content-sha256")
        if claimed is not None and claimed.lower() != payload_hash:
            raise invalid_signature("The provided 'x-amz-content-sha256' header does not match what was computed.")
        canonical = canonical_request(method, raw_path, low, auth.signed_headers, payload_hash)
        expected = sign(key.secret_access_key, auth, amz_date, canonical)
        if not hmac.compare_digest(expected, auth.signature):
            raise invalid_signature(
                f"{_MISMATCH}\n\nThe Canonical String for this request should have been\n'{canonical}'\n\n"
                f"The String-to-Sign should have been\n'{string_to_sign(amz_date, auth.scope, canonical)}'\n"
            )
        return key

    def _check_session(self, key: AccessKey, token: str | None, *, s3: bool) -> None:
        """A role session's key is good only with its token and until it expires (AWS's codes: S3 has its own)."""
        if key.session_token is None:
            return
        if token is None or not hmac.compare_digest(token, key.session_token):
            if s3:
                raise ApiError("InvalidToken", "The provided token is malformed or otherwise invalid.", 400)
            raise ApiError("UnrecognizedClientException", "The security token included in the request is invalid.", 403)
        if key.expires is not None and self.clock() >= key.expires:
            if s3:
                raise ApiError("ExpiredToken", "The provided token has expired.", 400)
            raise ApiError("ExpiredTokenException", "The security token included in the request is expired", 403)

    def _check_clock(self, amz_date: str, when: datetime) -> None:
        now_s = self.clock()
        skew = when.timestamp() - now_s  # epoch seconds: no datetime arithmetic on every request
        if -self.max_skew_s <= skew <= self.max_skew_s:
            return
        now = datetime.fromtimestamp(now_s, UTC)
        minutes = f"{self.max_skew_s / 60:g} min."
        if skew < -self.max_skew_s:
            earliest = datetime.fromtimestamp(now.timestamp() - self.max_skew_s, UTC).strftime(AMZ_DATE)
            raise invalid_signature(
                f"Signature expired: {amz_date} is now earlier than {earliest} ({now.strftime(AMZ_DATE)} - {minutes})"
            )
        if skew > self.max_skew_s:
            latest = datetime.fromtimestamp(now.timestamp() + self.max_skew_s, UTC).strftime(AMZ_DATE)
            raise invalid_signature(
                f"Signature not yet current: {amz_date} is still later than {latest} "
                f"({now.strftime(AMZ_DATE)} + {minutes})"
            )


# ---------------------------------------------------------------------------------------------------------- S3
UNSIGNED = "UNSIGNED-PAYLOAD"
PRESIGN_MAX_S = 7 * 24 * 3600


@dataclass(frozen=True)
class S3Signed:
    """An S3 request's verified key, what it claims of its payload (a SHA-256, UNSIGNED-PAYLOAD or a STREAMING-…
    mode), and for signed aws-chunked bodies the seed signature and scope that chain the chunk signatures."""

    key: AccessKey
    payload: str
    seed_signature: str
    amz_date: str
    scope: str
    signing_key: bytes


def _s3_canonical(
    method: str,
    path: str,
    query: str,
    headers: Mapping[str, str],
    signed: tuple[str, ...],
    payload: str,
    drop: str | None = None,
) -> str:
    # S3 signs the path exactly as sent: no dot-segment removal, no second encoding (botocore's S3SigV4Auth)
    pairs = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != drop]
    encoded = sorted((quote(k, safe="-_.~"), quote(v, safe="-_.~")) for k, v in pairs)
    lines = [method.upper(), path or "/", "&".join(f"{k}={v}" for k, v in encoded)]
    lines += [f"{name}:{' '.join(headers.get(name, '').split())}" for name in sorted(signed)]
    lines += ["", ";".join(sorted(signed)), payload]
    return "\n".join(lines)


def verify_s3(verifier: Verifier, method: str, raw_path: str, headers: Mapping[str, str]) -> S3Signed:
    """Check an S3 request's SigV4 signature (the Authorization header, or a presigned URL's query) before its
    body is read: the signature covers the claimed payload hash, which the caller checks against the bytes."""
    low = {k.lower(): v for k, v in headers.items()}
    path, _, query = raw_path.partition("?")
    params = dict(parse_qsl(query, keep_blank_values=True))
    if "authorization" in low:
        auth = parse_authorization(low["authorization"])
        amz_date, when = _request_time(low)
        payload = low.get("x-amz-content-sha256")
        if payload is None:
            raise incomplete("Missing required header for this request: x-amz-content-sha256")
        drop = None
    elif params.get("X-Amz-Algorithm"):
        if params["X-Amz-Algorithm"] != ALGORITHM:
            raise incomplete(f"Unsupported AWS 'algorithm': '{params['X-Amz-Algorithm']}'")
        missing = [
            p for p in ("X-Amz-Credential", "X-Amz-Date", "X-Amz-SignedHeaders", "X-Amz-Signature") if not params.get(p)
        ]
        if missing:
            raise incomplete(f"Query-string authentication requires {', '.join(missing)}")
        auth = parse_authorization(
            f"{ALGORITHM} Credential={params['X-Amz-Credential']}, SignedHeaders={params['X-Amz-SignedHeaders']}, "
            f"Signature={params['X-Amz-Signature']}"
        )
        amz_date, when = _request_time({"x-amz-date": params["X-Amz-Date"]})
        try:
            expires = int(params.get("X-Amz-Expires", "3600"))
        except ValueError:
            raise incomplete("X-Amz-Expires must be a number of seconds") from None
        if not 1 <= expires <= PRESIGN_MAX_S:
            raise incomplete(f"X-Amz-Expires must be between 1 and {PRESIGN_MAX_S} seconds")
        if verifier.clock() > when.timestamp() + expires:
            raise ApiError("AccessDenied", "Request has expired", 403)
        payload, drop = UNSIGNED, "X-Amz-Signature"
    else:
        raise ApiError("AccessDenied", "Access Denied: the request is not signed", 403)
    if auth.service != "s3":
        raise ApiError(
            "AuthorizationHeaderMalformed",
            f"The authorization header's service is '{auth.service}', expecting 's3'",
            400,
        )
    if verifier.region is not None and auth.region != verifier.region:
        raise ApiError(
            "AuthorizationHeaderMalformed",
            f"The authorization header is malformed; the region '{auth.region}' is wrong; expecting "
            f"'{verifier.region}'",
            400,
        )
    if "host" not in auth.signed_headers:
        raise invalid_signature("'Host' must be a 'SignedHeader' in the AWS Authorization.")
    if drop is None:
        verifier._check_clock(amz_date, when)
    key = verifier.keys.lookup(auth.access_key_id)
    if key is None:
        raise ApiError("InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records.", 403)
    verifier._check_session(key, low.get("x-amz-security-token") or params.get("X-Amz-Security-Token"), s3=True)
    canonical = _s3_canonical(method, path, query, low, auth.signed_headers, payload, drop)
    expected = sign(key.secret_access_key, auth, amz_date, canonical)
    if not hmac.compare_digest(expected, auth.signature):
        raise ApiError(
            "SignatureDoesNotMatch",
            "The request signature we calculated does not match the signature you provided. Check your key and "
            f"signing method. The canonical request should have been:\n{canonical}",
            403,
        )
    return S3Signed(
        key,
        payload,
        auth.signature,
        amz_date,
        auth.scope,
        signing_key(key.secret_access_key, auth.date, auth.region, auth.service),
    )


# ------------------------------------------------------------------------------------------------- signing
def sign_headers(
    method: str,
    raw_path: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    access_key_id: str,
    secret: str,
    region: str,
    service: str,
    now: float | None = None,
) -> dict[str, str]:
    """The ``X-Amz-Date`` and ``Authorization`` headers that sign a request, as ``botocore.auth.SigV4Auth`` signs it.

    ``headers`` are the ones sent (they must hold ``Host``, exactly as sent); all of them are signed. A client (the
    load generators) calls this per request: the signing key is cached per day, so a call is two SHA-256 and one
    HMAC over a few hundred bytes, not a botocore request object."""
    amz_date = time.strftime(AMZ_DATE, time.gmtime(time.time() if now is None else now))
    low = {k.lower(): v for k, v in headers.items()}
    low["x-amz-date"] = amz_date
    signed = tuple(sorted(low))
    canonical = canonical_request(method, raw_path, low, signed, hashlib.sha256(body).hexdigest())
    auth = Authorization(access_key_id, amz_date[:8], region, service, signed, "")
    signature = sign(secret, auth, amz_date, canonical)
    return {
        "X-Amz-Date": amz_date,
        "Authorization": f"{ALGORITHM} Credential={access_key_id}/{auth.scope}, SignedHeaders={';'.join(signed)}, "
        f"Signature={signature}",
    }
