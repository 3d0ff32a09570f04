"""UploadPartCopy (issue 45): a multipart upload's parts copied from objects, whole or by byte range, through real
botocore clients in process (servekit.testing.aws.asgi_client): the assembled object is the source's bytes; a range
outside the source is S3's InvalidArgument; a source that does not exist is NoSuchKey."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest

from servekit.aws.credentials import Credentials
from servekit.aws.sigv4 import Verifier
from servekit.services.s3.api import MIN_PART, S3Service
from servekit.services.s3.store import ObjectStore
from servekit.testing.aws import asgi_client


@pytest.fixture
def s3(tmp_path: Path) -> Any:
    creds = Credentials.load_or_create(tmp_path)
    client = asgi_client(S3Service(ObjectStore(tmp_path / "s3"), Verifier(creds)), "s3", creds.admin)
    client.create_bucket(Bucket="data")
    return client


def test_parts_copied_by_range_assemble_the_source(s3: Any) -> None:
    body = os.urandom(MIN_PART + 1234)
    s3.put_object(Bucket="data", Key="big", Body=body)
    upload = s3.create_multipart_upload(Bucket="data", Key="copy")["UploadId"]
    first = s3.upload_part_copy(
        Bucket="data", Key="copy", UploadId=upload, PartNumber=1, CopySource="data/big",
        CopySourceRange=f"bytes=0-{MIN_PART - 1}",
    )["CopyPartResult"]  # fmt: skip
    assert first["ETag"] == f'"{hashlib.md5(body[:MIN_PART]).hexdigest()}"'
    second = s3.upload_part_copy(
        Bucket="data", Key="copy", UploadId=upload, PartNumber=2, CopySource={"Bucket": "data", "Key": "big"},
        CopySourceRange=f"bytes={MIN_PART}-{len(body) - 1}",
    )["CopyPartResult"]  # fmt: skip
    parts = [{"PartNumber": 1, "ETag": first["ETag"]}, {"PartNumber": 2, "ETag": second["ETag"]}]
    s3.complete_multipart_upload(Bucket="data", Key="copy", UploadId=upload, MultipartUpload={"Parts": parts})
    assert s3.get_object(Bucket="data", Key="copy")["Body"].read() == body


def test_a_whole_source_is_one_part_and_bad_sources_say_why(s3: Any) -> None:
    s3.put_object(Bucket="data", Key="small", Body=b"0123456789")
    upload = s3.create_multipart_upload(Bucket="data", Key="one")["UploadId"]
    part = s3.upload_part_copy(Bucket="data", Key="one", UploadId=upload, PartNumber=1, CopySource="data/small")
    s3.complete_multipart_upload(
        Bucket="data", Key="one", UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["CopyPartResult"]["ETag"]}]},
    )  # fmt: skip
    assert s3.get_object(Bucket="data", Key="one")["Body"].read() == b"0123456789"
    other = s3.create_multipart_upload(Bucket="data", Key="two")["UploadId"]
    with pytest.raises(botocore.exceptions.ClientError) as outside:
        s3.upload_part_copy(
            Bucket="data",
            Key="two",
            UploadId=other,
            PartNumber=1,
            CopySource="data/small",
            CopySourceRange="bytes=5-10",
        )
    assert outside.value.response["Error"]["Code"] == "InvalidArgument"
    with pytest.raises(botocore.exceptions.ClientError) as missing:
        s3.upload_part_copy(Bucket="data", Key="two", UploadId=other, PartNumber=1, CopySource="data/nothing")
    assert missing.value.response["Error"]["Code"] == "NoSuchKey"
