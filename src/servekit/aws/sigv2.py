"""S3's presigned URLs in the older query form (``?AWSAccessKeyId=…&Signature=…&Expires=…``, HMAC-SHA1): what
boto3's ``generate_presigned_url`` writes for S3 unless the client is configured for ``s3v4``. Built as botocore's
``HmacV1QueryAuth`` signs: method, Content-MD5, Content-Type, Expires, the ``x-amz-*`` headers and the resource
(the path as sent plus the sub-resources S3 signs)."""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Callable, Mapping
from urllib.parse import parse_qsl

from servekit.aws.credentials import AccessKey
from servekit.aws.errors import ApiError
from servekit.aws.sigv4 import KeyLookup

# The query parameters S3 signs as part of the resource (botocore's HmacV1Auth.QSAOfInterest).
SUBRESOURCES = frozenset(
    "accelerate acl cors defaultObjectAcl location logging partNumber policy requestPayment torrent versioning "
    "versionId versions website uploads uploadId response-content-type response-content-language response-expires "
    "response-cache-control response-content-disposition response-content-encoding delete lifecycle tagging "
    "restore storageClass notification replication analytics metrics inventory select select-type "
    "object-lock".split()
)


def is_v2_presigned(query: str) -> bool:
    return "AWSAccessKeyId=" in query and "Signature=" in query


def verify_v2_query(
    keys: KeyLookup, clock: Callable[[], float], method: str, raw_path: str, headers: Mapping[str, str]
) -> AccessKey:
    path, _, query = raw_path.partition("?")
    params = parse_qsl(query, keep_blank_values=True)
    given = dict(params)
    low = {k.lower(): v for k, v in headers.items()}
    try:
        expires = int(given.get("Expires", ""))
    except ValueError:
        raise ApiError("AccessDenied", "Query-string authentication requires the Expires parameter", 403) from None
    if clock() > expires:
        raise ApiError("AccessDenied", "Request has expired", 403)
    key = keys.lookup(given.get("AWSAccessKeyId", ""))
    if key is None:
        raise ApiError("InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist in our records.", 403)
    sub = sorted((k, v) for k, v in params if k in SUBRESOURCES)
    resource = path + ("?" + "&".join(f"{k}={v}" if v else k for k, v in sub) if sub else "")
    amz = "".join(f"{k}:{low[k].strip()}\n" for k in sorted(low) if k.startswith("x-amz-"))
    text = f"{method.upper()}\n{low.get('content-md5', '')}\n{low.get('content-type', '')}\n{expires}\n{amz}{resource}"
    expected = base64.b64encode(hmac.new(key.secret_access_key.encode(), text.encode(), hashlib.sha1).digest())
    if not hmac.compare_digest(expected.decode(), given.get("Signature", "")):
        raise ApiError(
            "SignatureDoesNotMatch",
            f"The request signature we calculated does not match the signature you provided. String to sign: {text!r}",
            403,
        )
    return key
