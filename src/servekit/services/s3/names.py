"""S3's names and permissions: which bucket names S3 accepts, how long a key may be, and the IAM actions (on which
ARNs) each operation needs of a role session's policy."""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import unquote

_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")

# Names S3 keeps for its own kinds of bucket (access point aliases, Object Lambda, directory and table buckets,
# internationalised domain names): refused at CreateBucket with InvalidBucketName, as AWS does
RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
MAX_KEY_BYTES = 1024  # S3's limit on an object key, UTF-8 encoded (KeyTooLongError)


# Each operation's IAM action (on the bucket's ARN, or the object's where the operation names a key)
_ACTIONS = {
    "ListBuckets": "s3:ListAllMyBuckets",
    "HeadBucket": "s3:ListBucket",
    "ListObjects": "s3:ListBucket",
    "ListObjectsV2": "s3:ListBucket",
    "ListMultipartUploads": "s3:ListBucketMultipartUploads",
    "HeadObject": "s3:GetObject",
    "CreateMultipartUpload": "s3:PutObject",
    "UploadPart": "s3:PutObject",
    "UploadPartCopy": "s3:PutObject",
    "CompleteMultipartUpload": "s3:PutObject",
    "CopyObject": "s3:PutObject",
    "ListParts": "s3:ListMultipartUploadParts",
    "DeleteObjects": "s3:DeleteObject",
}


def permissions(op: str, bucket: str, key: str | None, headers: Mapping[str, str]) -> list[tuple[str, str]]:
    """(action, resource) pairs a request needs: ``s3:GetObject`` on ``arn:aws:s3:::bucket/key`` and the like; a
    copy needs ``s3:GetObject`` on its source too. DeleteObjects is checked on ``bucket/*`` (every key it could
    name)."""
    action = _ACTIONS.get(op, f"s3:{op}")
    if op == "ListBuckets":
        return [(action, "*")]
    if op == "DeleteObjects":
        return [(action, f"arn:aws:s3:::{bucket}/*")]
    needed = [(action, f"arn:aws:s3:::{bucket}" + (f"/{key}" if key is not None else ""))]
    source = headers.get("x-amz-copy-source")
    if source:
        needed.append(("s3:GetObject", "arn:aws:s3:::" + unquote(source.split("?versionId=")[0]).lstrip("/")))
    return needed


def valid_bucket_name(name: str) -> bool:
    return (
        bool(_BUCKET.fullmatch(name))
        and ".." not in name
        and not re.fullmatch(r"\d+\.\d+\.\d+\.\d+", name)
        and not name.startswith(RESERVED_PREFIXES)
        and not name.endswith(RESERVED_SUFFIXES)
    )
