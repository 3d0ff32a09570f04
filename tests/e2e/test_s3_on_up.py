"""S3 and STS on a real ``servekit up``'s port, with boto3 (its transfer manager and paginators), presigned URLs
fetched with ``requests``, the AWS CLI, and SIGKILL: what is acknowledged survives, what is cut short never shows."""

from __future__ import annotations

import hashlib
import http.client
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import botocore.exceptions
import pytest
import requests

from servekit.aws import Credentials
from servekit.testing.hosting import UpProcess

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    u = UpProcess(tmp_path_factory.mktemp("s3-up") / "home")
    u.start()
    try:
        yield u
    finally:
        u.stop()


def boto(up: UpProcess, service: str) -> Any:
    key = Credentials.load_or_create(up.home).admin
    return boto3.session.Session().client(
        service,
        endpoint_url=up.url,
        region_name="us-east-1",
        aws_access_key_id=key.access_key_id,
        aws_secret_access_key=key.secret_access_key,
    )


def test_the_sdks_default_bucket_exists_and_sts_names_the_account(up: UpProcess) -> None:
    names = [b["Name"] for b in boto(up, "s3").list_buckets()["Buckets"]]
    assert "sagemaker-us-east-1-000000000000" in names
    assert boto(up, "sts").get_caller_identity()["Account"] == "000000000000"


@pytest.mark.slow  # 13 s on the 2-core machine (make test-slow)
def test_upload_download_and_list_through_boto3(up: UpProcess, tmp_path: Path) -> None:
    s3 = boto(up, "s3")
    s3.create_bucket(Bucket="e2e")
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(20 * 2**20))  # multipart: three 8 MiB parts, default checksums
    s3.upload_file(str(src), "e2e", "data/big.bin")
    s3.download_file("e2e", "data/big.bin", str(tmp_path / "back.bin"))
    assert hashlib.sha256((tmp_path / "back.bin").read_bytes()).digest() == hashlib.sha256(src.read_bytes()).digest()
    assert (up.home / "s3" / "e2e" / "data" / "big.bin").read_bytes() == src.read_bytes()
    for i in range(2500):
        s3.put_object(Bucket="e2e", Key=f"many/{i:05d}", Body=b"x")
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket="e2e", Prefix="many/")
    assert [c["Key"] for p in pages for c in p["Contents"]] == [f"many/{i:05d}" for i in range(2500)]
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "e2e", "Key": "many/00007"}, ExpiresIn=60)
    assert requests.get(url, timeout=10).content == b"x"
    put = s3.generate_presigned_url("put_object", Params={"Bucket": "e2e", "Key": "shared.txt"}, ExpiresIn=60)
    assert requests.put(put, data=b"from a presigned URL", timeout=10).status_code == 200
    assert s3.get_object(Bucket="e2e", Key="shared.txt")["Body"].read() == b"from a presigned URL"


@pytest.mark.skipif(shutil.which("aws") is None, reason="the AWS CLI is not installed")
def test_the_aws_cli_copies_lists_and_syncs(up: UpProcess, tmp_path: Path) -> None:
    key = Credentials.load_or_create(up.home).admin
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": key.access_key_id,
        "AWS_SECRET_ACCESS_KEY": key.secret_access_key,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": up.url,
    }
    (tmp_path / "tree" / "sub").mkdir(parents=True)
    (tmp_path / "tree" / "a.txt").write_text("a")
    (tmp_path / "tree" / "sub" / "b.txt").write_text("b")

    def aws(*args: str) -> str:
        done = subprocess.run(["aws", *args], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    aws("s3", "mb", "s3://cli-bucket")
    aws("s3", "cp", str(tmp_path / "tree" / "a.txt"), "s3://cli-bucket/one/a.txt")
    aws("s3", "sync", str(tmp_path / "tree"), "s3://cli-bucket/synced")
    listing = aws("s3", "ls", "--recursive", "s3://cli-bucket")
    assert "one/a.txt" in listing and "synced/sub/b.txt" in listing
    aws("s3", "sync", "s3://cli-bucket/synced", str(tmp_path / "back"))
    assert (tmp_path / "back" / "sub" / "b.txt").read_text() == "b"
    # within S3, above the CLI's 8 MB multipart threshold: UploadPartCopy, then the source deleted by mv
    big = os.urandom(9 * 2**20)
    (tmp_path / "big.bin").write_bytes(big)
    aws("s3", "cp", str(tmp_path / "big.bin"), "s3://cli-bucket/big.bin")
    aws("s3", "cp", "s3://cli-bucket/big.bin", "s3://cli-bucket/copied.bin")
    aws("s3", "mv", "s3://cli-bucket/copied.bin", "s3://cli-bucket/moved.bin")
    aws("s3", "cp", "s3://cli-bucket/moved.bin", str(tmp_path / "moved.bin"))
    assert (tmp_path / "moved.bin").read_bytes() == big
    assert "copied.bin" not in aws("s3", "ls", "s3://cli-bucket/")


def test_acknowledged_objects_survive_sigkill_and_a_cut_upload_never_shows(tmp_path: Path) -> None:
    up = UpProcess(tmp_path / "home")
    up.start()
    try:
        s3 = boto(up, "s3")
        s3.create_bucket(Bucket="durable")
        body = os.urandom(3 * 2**20)
        s3.put_object(Bucket="durable", Key="kept.bin", Body=body)
        # a PUT whose connection dies half-way (the client sends 1 MiB of the 4 MiB it announced, then SIGKILL)
        url = s3.generate_presigned_url("put_object", Params={"Bucket": "durable", "Key": "cut.bin"}, ExpiresIn=60)
        conn = http.client.HTTPConnection("127.0.0.1", up.port, timeout=10)
        conn.putrequest("PUT", url.split(str(up.port), 1)[1])
        conn.putheader("Content-Length", str(4 * 2**20))
        conn.endheaders()
        conn.send(b"z" * 2**20)
        up.kill()
        conn.close()
        up.start()
        s3 = boto(up, "s3")
        assert s3.get_object(Bucket="durable", Key="kept.bin")["Body"].read() == body
        with pytest.raises(botocore.exceptions.ClientError) as cut:
            s3.head_object(Bucket="durable", Key="cut.bin")
        assert cut.value.response["Error"]["Code"] == "404"
        assert not (up.home / "s3" / "durable" / "cut.bin").exists()
        assert not list((up.home / "s3" / ".tmp").iterdir())  # the cut body's temporary file is gone
    finally:
        up.stop()
