"""S3's server-side encryption fields and bucket settings (issue 45), through real botocore clients in process, with
the plane's real KMS beside it: every object says how it is encrypted (AES256 by default, as AWS's do), ``aws:kms``
names its key by ARN (``aws/s3`` when none is named), a bucket's default encryption applies to what names none,
a key KMS does not know or has disabled is refused with S3's KMS error; bucket policies are kept and returned."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest

from servekit.aws.credentials import Credentials
from servekit.aws.names import Account
from servekit.aws.sigv4 import Verifier
from servekit.launch.up import s3_kms
from servekit.services.database import StateDB
from servekit.services.kms.api import KmsApi
from servekit.services.kms.crypto import Master
from servekit.services.s3.api import S3Service
from servekit.services.s3.store import ObjectStore
from servekit.testing.aws import asgi_client


@pytest.fixture
def plane(tmp_path: Path) -> tuple[Any, KmsApi]:
    creds = Credentials.load_or_create(tmp_path)
    kms = KmsApi(StateDB.open(tmp_path).kms_keys, Master(tmp_path), Account())
    service = S3Service(ObjectStore(tmp_path / "s3"), Verifier(creds), kms=s3_kms(kms))
    s3 = asgi_client(service, "s3", creds.admin)
    s3.create_bucket(Bucket="data")
    return s3, kms


def _code(exc: pytest.ExceptionInfo[botocore.exceptions.ClientError]) -> str:
    return str(exc.value.response["Error"]["Code"])


def test_every_object_says_how_it_is_encrypted(plane: tuple[Any, KmsApi]) -> None:
    s3, kms = plane
    assert s3.put_object(Bucket="data", Key="plain", Body=b"x")["ServerSideEncryption"] == "AES256"
    assert s3.head_object(Bucket="data", Key="plain")["ServerSideEncryption"] == "AES256"
    key = kms.create_key({})["KeyMetadata"]
    kms.create_alias({"AliasName": "alias/data", "TargetKeyId": key["KeyId"]})
    out = s3.put_object(Bucket="data", Key="k", Body=b"y", ServerSideEncryption="aws:kms", SSEKMSKeyId="alias/data")
    assert (out["ServerSideEncryption"], out["SSEKMSKeyId"]) == ("aws:kms", key["Arn"])
    got = s3.get_object(Bucket="data", Key="k")
    assert (got["ServerSideEncryption"], got["SSEKMSKeyId"], got["Body"].read()) == ("aws:kms", key["Arn"], b"y")
    aws_s3 = s3.put_object(Bucket="data", Key="d", Body=b"z", ServerSideEncryption="aws:kms")["SSEKMSKeyId"]
    assert aws_s3 == kms.describe_key({"KeyId": "alias/aws/s3"})["KeyMetadata"]["Arn"]
    copied = s3.copy_object(Bucket="data", Key="k2", CopySource="data/k")  # the destination's own: the default
    assert copied["ServerSideEncryption"] == "AES256" and "SSEKMSKeyId" not in copied
    upload = s3.create_multipart_upload(Bucket="data", Key="mp", ServerSideEncryption="aws:kms", SSEKMSKeyId=key["Arn"])
    assert upload["SSEKMSKeyId"] == key["Arn"]
    part = s3.upload_part(Bucket="data", Key="mp", UploadId=upload["UploadId"], PartNumber=1, Body=b"p")
    assert part["SSEKMSKeyId"] == key["Arn"]
    done = s3.complete_multipart_upload(
        Bucket="data", Key="mp", UploadId=upload["UploadId"],
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
    )  # fmt: skip
    assert (done["ServerSideEncryption"], done["SSEKMSKeyId"]) == ("aws:kms", key["Arn"])


def test_a_buckets_default_encryption_applies_to_what_names_none(plane: tuple[Any, KmsApi]) -> None:
    s3, kms = plane
    assert s3.get_bucket_encryption(Bucket="data")["ServerSideEncryptionConfiguration"]["Rules"][0][
        "ApplyServerSideEncryptionByDefault"
    ] == {"SSEAlgorithm": "AES256"}
    key = kms.create_key({})["KeyMetadata"]
    rule = {"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": key["KeyId"]}}
    s3.put_bucket_encryption(Bucket="data", ServerSideEncryptionConfiguration={"Rules": [rule]})
    stored = s3.get_bucket_encryption(Bucket="data")["ServerSideEncryptionConfiguration"]["Rules"][0]
    assert stored["ApplyServerSideEncryptionByDefault"] == {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": key["Arn"]}
    assert s3.put_object(Bucket="data", Key="a", Body=b"x")["SSEKMSKeyId"] == key["Arn"]
    assert (
        s3.put_object(Bucket="data", Key="b", Body=b"x", ServerSideEncryption="AES256")["ServerSideEncryption"]
        == "AES256"
    )
    s3.delete_bucket_encryption(Bucket="data")
    assert s3.put_object(Bucket="data", Key="c", Body=b"x")["ServerSideEncryption"] == "AES256"


def test_keys_kms_refuses_and_customer_keys_are_refused_with_the_reason(plane: tuple[Any, KmsApi]) -> None:
    s3, kms = plane
    with pytest.raises(botocore.exceptions.ClientError) as unknown:
        s3.put_object(Bucket="data", Key="x", Body=b"x", ServerSideEncryption="aws:kms", SSEKMSKeyId="alias/nope")
    assert _code(unknown) == "KMS.NotFoundException"
    key = kms.create_key({})["KeyMetadata"]["KeyId"]
    kms.disable_key({"KeyId": key})
    with pytest.raises(botocore.exceptions.ClientError) as disabled:
        s3.put_object(Bucket="data", Key="x", Body=b"x", ServerSideEncryption="aws:kms", SSEKMSKeyId=key)
    assert _code(disabled) == "KMS.DisabledException"
    with pytest.raises(botocore.exceptions.ClientError) as sse_c:
        s3.put_object(Bucket="data", Key="x", Body=b"x", SSECustomerAlgorithm="AES256", SSECustomerKey="k" * 32)
    assert _code(sse_c) == "NotImplemented" and "SSE-C" in sse_c.value.response["Error"]["Message"]
    assert s3.list_objects_v2(Bucket="data")["KeyCount"] == 0  # nothing refused was stored


def test_a_bucket_policy_is_kept_and_returned(plane: tuple[Any, KmsApi]) -> None:
    s3, _ = plane
    with pytest.raises(botocore.exceptions.ClientError) as none:
        s3.get_bucket_policy(Bucket="data")
    assert _code(none) == "NoSuchBucketPolicy"
    deny = {"Effect": "Deny", "Principal": "*", "Action": "s3:PutObject", "Resource": "arn:aws:s3:::data/*"}
    unencrypted = {"Null": {"s3:x-amz-server-side-encryption": "true"}}
    policy = {"Version": "2012-10-17", "Statement": [{**deny, "Condition": unencrypted}]}
    s3.put_bucket_policy(Bucket="data", Policy=json.dumps(policy))
    assert json.loads(s3.get_bucket_policy(Bucket="data")["Policy"]) == policy
    with pytest.raises(botocore.exceptions.ClientError) as bad:
        s3.put_bucket_policy(Bucket="data", Policy="not json")
    assert _code(bad) == "MalformedPolicy"
    s3.delete_bucket_policy(Bucket="data")
    with pytest.raises(botocore.exceptions.ClientError):
        s3.get_bucket_policy(Bucket="data")
