"""Server-side encryption as S3 reports it, and the bucket settings that go with it (default encryption, the
bucket policy).

Since 2023 AWS encrypts every new object, with AES256 (SSE-S3) unless the request or the bucket's default encryption
says ``aws:kms``, and says which in PutObject's, HeadObject's and GetObject's ``x-amz-server-side-encryption``
(and the key's ARN in ``x-amz-server-side-encryption-aws-kms-key-id``). servekit does the same: a KMS key named in a
request is resolved with the plane's KMS (its id, ARN or alias; ``alias/aws/s3`` when none is named) and reported
by its ARN; a key KMS does not know is refused as AWS refuses it (``KMS.NotFoundException``). The bytes on disk are
the object's as sent: the store is the home's, protected by its file permissions, and docs/s3.md says so.
Customer-provided keys (SSE-C) are refused, saying so.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from servekit.services.s3.store import ObjectStore, StoreError

KmsArn = Callable[[str], str]  # a KMS key's id, ARN or alias -> its ARN; StoreError when KMS does not know it
DEFAULT_RULE: dict[str, Any] = {
    "ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"},
    "BucketKeyEnabled": False,
}
ALGORITHMS = ("AES256", "aws:kms", "aws:kms:dsse")
ENCRYPTION = "encryption"  # the bucket settings' names
POLICY = "policy"


def object_encryption(p: Mapping[str, Any], default: Mapping[str, Any] | None, kms: KmsArn | None) -> dict[str, str]:
    """The object's encryption (the members S3's responses carry) from the request ``p`` or, when it names none,
    the bucket's ``default`` rule."""
    if p.get("SSECustomerAlgorithm") or p.get("SSECustomerKey"):
        raise StoreError("NotImplemented", "servekit's S3 does not take customer-provided keys (SSE-C)", 501)
    algorithm, key = p.get("ServerSideEncryption"), p.get("SSEKMSKeyId")
    if algorithm is None:
        if key:
            raise StoreError(
                "InvalidArgument",
                "x-amz-server-side-encryption-aws-kms-key-id is only valid with x-amz-server-side-encryption: aws:kms",
            )
        rule = (default or DEFAULT_RULE)["ApplyServerSideEncryptionByDefault"]
        algorithm, key = rule["SSEAlgorithm"], rule.get("KMSMasterKeyID")
    if algorithm not in ALGORITHMS:
        raise StoreError(
            "InvalidArgument",
            f"The encryption method specified is not supported: {algorithm} ({', '.join(ALGORITHMS)})",
        )
    if algorithm == "AES256":
        if key:
            raise StoreError("InvalidArgument", "A KMS key id is only valid with x-amz-server-side-encryption: aws:kms")
        return {"ServerSideEncryption": "AES256"}
    if kms is None:
        raise StoreError("NotImplemented", "this S3 has no KMS beside it to encrypt with aws:kms", 501)
    return {"ServerSideEncryption": algorithm, "SSEKMSKeyId": kms(key or "alias/aws/s3")}


def reported(headers: Mapping[str, str]) -> dict[str, str]:
    """The encryption members of an object stored with ``headers``: AES256 for one stored before servekit kept it
    (every object is encrypted, as AWS says of its own)."""
    out = {k: headers[k] for k in ("ServerSideEncryption", "SSEKMSKeyId") if k in headers}
    return out or {"ServerSideEncryption": "AES256"}


def checked_rule(config: Mapping[str, Any], kms: KmsArn | None) -> dict[str, Any]:
    """PutBucketEncryption's one rule, its KMS key resolved to its ARN; MalformedXML or the KMS error otherwise."""
    rules = config.get("Rules") or []
    if len(rules) != 1 or "ApplyServerSideEncryptionByDefault" not in rules[0]:
        raise StoreError(
            "MalformedXML", "ServerSideEncryptionConfiguration takes one Rule with ApplyServerSideEncryptionByDefault"
        )
    default = dict(rules[0]["ApplyServerSideEncryptionByDefault"])
    encryption = object_encryption(
        {"ServerSideEncryption": default.get("SSEAlgorithm"), "SSEKMSKeyId": default.get("KMSMasterKeyID")}, None, kms
    )
    default = {"SSEAlgorithm": encryption["ServerSideEncryption"]}
    if "SSEKMSKeyId" in encryption:
        default["KMSMasterKeyID"] = encryption["SSEKMSKeyId"]
    return {"ApplyServerSideEncryptionByDefault": default, "BucketKeyEnabled": bool(rules[0].get("BucketKeyEnabled"))}


def checked_policy(text: str | bytes) -> str:
    """A bucket policy as given, when it is a JSON policy document (kept and returned, not evaluated)."""
    raw = text.decode() if isinstance(text, bytes) else text
    try:
        doc = json.loads(raw)
    except ValueError:
        raise StoreError("MalformedPolicy", "Policies must be valid JSON and the first byte must be '{'") from None
    if not isinstance(doc, dict) or not doc.get("Statement"):
        raise StoreError("MalformedPolicy", "A bucket policy is a JSON object with a Statement")
    return raw


class BucketSettings:
    """The bucket operations over these settings: Put/Get/DeleteBucketEncryption, Put/Get/DeleteBucketPolicy."""

    def __init__(self, store: ObjectStore, kms: KmsArn | None) -> None:
        self.store = store
        self.kms = kms

    def handlers(self) -> dict[str, Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]]:
        return {
            "PutBucketEncryption": self.put_bucket_encryption,
            "GetBucketEncryption": self.get_bucket_encryption,
            "DeleteBucketEncryption": self.delete_bucket_encryption,
            "PutBucketPolicy": self.put_bucket_policy,
            "GetBucketPolicy": self.get_bucket_policy,
            "DeleteBucketPolicy": self.delete_bucket_policy,
        }

    def default_rule(self, bucket: str) -> dict[str, Any] | None:
        """The bucket's default encryption rule, when one was put."""
        text = self.store.setting(bucket, ENCRYPTION)
        return None if text is None else dict(json.loads(text))

    def encryption(self, p: Mapping[str, Any]) -> dict[str, str]:
        """:func:`object_encryption` of a request on ``p["Bucket"]``."""
        return object_encryption(p, self.default_rule(p["Bucket"]), self.kms)

    async def put_bucket_encryption(self, p: dict[str, Any]) -> dict[str, Any]:
        rule = checked_rule(p.get("ServerSideEncryptionConfiguration") or {}, self.kms)
        self.store.set_setting(p["Bucket"], ENCRYPTION, json.dumps(rule))
        return {}

    async def get_bucket_encryption(self, p: dict[str, Any]) -> dict[str, Any]:
        self.store.require_bucket(p["Bucket"])
        return {"ServerSideEncryptionConfiguration": {"Rules": [self.default_rule(p["Bucket"]) or DEFAULT_RULE]}}

    async def delete_bucket_encryption(self, p: dict[str, Any]) -> dict[str, Any]:
        self.store.set_setting(p["Bucket"], ENCRYPTION, None)  # back to AES256, as AWS's default
        return {}

    async def put_bucket_policy(self, p: dict[str, Any]) -> dict[str, Any]:
        self.store.set_setting(p["Bucket"], POLICY, checked_policy(p.get("Policy") or ""))
        return {}

    async def get_bucket_policy(self, p: dict[str, Any]) -> dict[str, Any]:
        self.store.require_bucket(p["Bucket"])
        text = self.store.setting(p["Bucket"], POLICY)
        if text is None:
            raise StoreError("NoSuchBucketPolicy", "The bucket policy does not exist", 404)
        return {"Policy": text}

    async def delete_bucket_policy(self, p: dict[str, Any]) -> dict[str, Any]:
        self.store.set_setting(p["Bucket"], POLICY, None)
        return {}
