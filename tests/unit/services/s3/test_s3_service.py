"""S3 on servekit up, driven by real botocore clients in process (servekit.testing.aws.asgi_client): requests are
built, signed and parsed by the installed botocore exactly as against AWS."""

from __future__ import annotations

import base64
import hashlib
import io
import time
import zlib
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest
from botocore.config import Config

from servekit.aws.credentials import Credentials
from servekit.aws.sigv4 import Verifier
from servekit.services.s3.api import S3Service
from servekit.services.s3.store import ObjectStore
from servekit.testing.aws import asgi_call, asgi_client


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def creds(home: Path) -> Credentials:
    return Credentials.load_or_create(home)


@pytest.fixture
def service(home: Path, creds: Credentials) -> S3Service:
    return S3Service(ObjectStore(home / "s3"), Verifier(creds))


@pytest.fixture
def s3(service: S3Service, creds: Credentials) -> Any:
    client = asgi_client(service, "s3", creds.admin)
    client.create_bucket(Bucket="data")
    return client


def code(exc: pytest.ExceptionInfo[botocore.exceptions.ClientError]) -> str:
    return str(exc.value.response["Error"]["Code"])


def test_put_get_head_keep_bytes_metadata_and_the_md5_etag(s3: Any, home: Path) -> None:
    body = b"a,b\n1,2\n"
    s3.put_object(Bucket="data", Key="train/part 1.csv", Body=body, ContentType="text/csv", Metadata={"owner": "ml"})
    got = s3.get_object(Bucket="data", Key="train/part 1.csv")
    assert got["Body"].read() == b"a,b\n1,2\n"
    assert got["ETag"] == f'"{hashlib.md5(body).hexdigest()}"'
    assert (got["ContentType"], got["Metadata"]) == ("text/csv", {"owner": "ml"})
    assert s3.head_object(Bucket="data", Key="train/part 1.csv")["ContentLength"] == 8
    # the object is a plain file a user (and servekit's own components) can read
    assert (home / "s3" / "data" / "train" / "part 1.csv").read_bytes() == b"a,b\n1,2\n"


def test_ranges_and_an_unsatisfiable_range(s3: Any) -> None:
    s3.put_object(Bucket="data", Key="r", Body=b"0123456789")
    assert s3.get_object(Bucket="data", Key="r", Range="bytes=2-4")["Body"].read() == b"234"
    assert s3.get_object(Bucket="data", Key="r", Range="bytes=-3")["Body"].read() == b"789"
    assert s3.get_object(Bucket="data", Key="r", Range="bytes=8-")["ContentRange"] == "bytes 8-9/10"
    with pytest.raises(botocore.exceptions.ClientError) as bad:
        s3.get_object(Bucket="data", Key="r", Range="bytes=20-30")
    assert code(bad) == "InvalidRange"


def test_missing_buckets_keys_and_bad_names_answer_s3s_codes(s3: Any) -> None:
    with pytest.raises(botocore.exceptions.ClientError) as nokey:
        s3.get_object(Bucket="data", Key="absent")
    assert code(nokey) == "NoSuchKey"
    with pytest.raises(botocore.exceptions.ClientError) as nobucket:
        s3.put_object(Bucket="nowhere", Key="k", Body=b"x")
    assert code(nobucket) == "NoSuchBucket"
    with pytest.raises(botocore.exceptions.ClientError) as again:
        s3.create_bucket(Bucket="data")
    assert code(again) == "BucketAlreadyOwnedByYou"
    with pytest.raises(botocore.exceptions.ClientError) as badname:
        s3.create_bucket(Bucket="Bad_Name")
    assert code(badname) == "InvalidBucketName"
    with pytest.raises(botocore.exceptions.ClientError) as head:
        s3.head_bucket(Bucket="nowhere")
    assert head.value.response["Error"]["Code"] == "404"


def test_a_wrong_checksum_is_refused_and_nothing_is_written(s3: Any, home: Path) -> None:
    with pytest.raises(botocore.exceptions.ClientError) as bad:
        s3.put_object(Bucket="data", Key="k", Body=b"payload", ChecksumCRC32="AAAAAA==")
    assert code(bad) == "BadDigest"
    with pytest.raises(botocore.exceptions.ClientError):
        s3.head_object(Bucket="data", Key="k")
    assert not list((home / "s3" / ".tmp").iterdir())
    assert not (home / "s3" / "data" / "k").exists()


def test_checksums_are_verified_stored_and_returned(s3: Any) -> None:
    out = s3.put_object(Bucket="data", Key="c", Body=b"payload", ChecksumAlgorithm="SHA256")
    assert out["ChecksumSHA256"] == base64.b64encode(hashlib.sha256(b"payload").digest()).decode()
    crc = s3.put_object(Bucket="data", Key="d", Body=b"payload")  # CRC32 by default in current botocore
    assert crc.get("ChecksumCRC32") in (None, base64.b64encode(zlib.crc32(b"payload").to_bytes(4, "big")).decode())
    head = s3.head_object(Bucket="data", Key="c", ChecksumMode="ENABLED")
    assert head["ChecksumSHA256"] == out["ChecksumSHA256"]


def test_crc64nvme_is_verified_stored_and_returned(s3: Any) -> None:
    """CRC-64/NVME, the AWS SDKs' default checksum (pyarrow's S3 client sends it in a trailer): the check value of
    ``123456789`` is 0xAE8B14860A799888; a wrong one is refused."""
    check = base64.b64encode((0xAE8B14860A799888).to_bytes(8, "big")).decode()
    out = s3.put_object(Bucket="data", Key="n", Body=b"123456789", ChecksumCRC64NVME=check)
    assert out["ChecksumCRC64NVME"] == check
    head = s3.head_object(Bucket="data", Key="n", ChecksumMode="ENABLED")
    assert head["ChecksumCRC64NVME"] == check
    with pytest.raises(botocore.exceptions.ClientError) as bad:
        s3.put_object(Bucket="data", Key="m", Body=b"123456780", ChecksumCRC64NVME=check)
    assert code(bad) == "BadDigest"


def test_a_body_that_does_not_match_its_signed_hash_is_refused(s3: Any) -> None:
    def swap(request: Any, **_: Any) -> None:
        request.body = b"other bytes"

    s3.meta.events.register_first("before-send.s3.PutObject", swap)  # after signing: the bytes change on the way
    with pytest.raises(botocore.exceptions.ClientError) as bad:
        s3.put_object(Bucket="data", Key="k", Body=b"some bytes", ChecksumAlgorithm="SHA1")
    assert code(bad) in ("XAmzContentSHA256Mismatch", "BadDigest")


def test_hostile_keys_stay_inside_the_bucket_folder(s3: Any, home: Path) -> None:
    keys = ["../../escape", "a/../../b", "/abs", "dir/", "x" * 300, "é/ü", "a//b", ".servekit-objects/x", "./dot"]
    for k in keys:
        s3.put_object(Bucket="data", Key=k, Body=k.encode())
    for k in keys:
        assert s3.get_object(Bucket="data", Key=k)["Body"].read() == k.encode()
    bucket = (home / "s3" / "data").resolve()
    for path in (home / "s3").rglob("*"):
        if path.is_file() and path.parent.name not in (".tmp",) and "index" not in path.name:
            assert bucket in path.resolve().parents or path.resolve().parent == home.resolve() / "s3"
    assert not (home / "escape").exists() and not (home.parent / "escape").exists()
    listed = [c["Key"] for c in s3.list_objects_v2(Bucket="data")["Contents"]]
    assert sorted(keys, key=lambda k: k.encode()) == listed


def test_a_key_and_a_prefix_of_the_same_name_both_live(s3: Any) -> None:
    s3.put_object(Bucket="data", Key="a", Body=b"file")
    s3.put_object(Bucket="data", Key="a/b", Body=b"under")
    assert s3.get_object(Bucket="data", Key="a")["Body"].read() == b"file"
    assert s3.get_object(Bucket="data", Key="a/b")["Body"].read() == b"under"


def test_listing_pages_delimiters_and_start_after(s3: Any) -> None:
    for i in range(25):
        s3.put_object(Bucket="data", Key=f"logs/{i:02d}.txt", Body=b"x")
    s3.put_object(Bucket="data", Key="models/m1/model.onnx", Body=b"m")
    s3.put_object(Bucket="data", Key="top.txt", Body=b"t")
    pages = s3.get_paginator("list_objects_v2").paginate(
        Bucket="data", Prefix="logs/", PaginationConfig={"PageSize": 10}
    )
    keys = [c["Key"] for p in pages for c in p.get("Contents", [])]
    assert keys == [f"logs/{i:02d}.txt" for i in range(25)]
    top = s3.list_objects_v2(Bucket="data", Delimiter="/")
    assert [p["Prefix"] for p in top["CommonPrefixes"]] == ["logs/", "models/"]
    assert [c["Key"] for c in top["Contents"]] == ["top.txt"]
    after = s3.list_objects_v2(Bucket="data", Prefix="logs/", StartAfter="logs/22.txt")
    assert [c["Key"] for c in after["Contents"]] == ["logs/23.txt", "logs/24.txt"]
    v1 = s3.get_paginator("list_objects").paginate(Bucket="data", Delimiter="/", PaginationConfig={"PageSize": 1})
    assert [p["Prefix"] for page in v1 for p in page.get("CommonPrefixes", [])] == ["logs/", "models/"]


def test_multipart_upload_through_the_transfer_manager(s3: Any) -> None:
    data = bytes(range(256)) * (12 * 2**20 // 256)  # 12 MiB: two parts at 8 MiB
    s3.upload_fileobj(io.BytesIO(data), "data", "big.bin")
    head = s3.head_object(Bucket="data", Key="big.bin")
    md5s = [hashlib.md5(data[i : i + 8 * 2**20]).digest() for i in range(0, len(data), 8 * 2**20)]
    assert head["ETag"] == f'"{hashlib.md5(b"".join(md5s)).hexdigest()}-2"'
    out = io.BytesIO()
    s3.download_fileobj("data", "big.bin", out)
    assert out.getvalue() == data


def test_multipart_parts_are_checked_listed_and_aborted(s3: Any) -> None:
    up = s3.create_multipart_upload(Bucket="data", Key="mp")["UploadId"]
    small = s3.upload_part(Bucket="data", Key="mp", UploadId=up, PartNumber=1, Body=b"a" * 10)
    s3.upload_part(Bucket="data", Key="mp", UploadId=up, PartNumber=2, Body=b"b" * 10)
    assert [p["PartNumber"] for p in s3.list_parts(Bucket="data", Key="mp", UploadId=up)["Parts"]] == [1, 2]
    assert [u["UploadId"] for u in s3.list_multipart_uploads(Bucket="data")["Uploads"]] == [up]
    parts = [{"PartNumber": 1, "ETag": small["ETag"]}, {"PartNumber": 2, "ETag": '"0000"'}]
    with pytest.raises(botocore.exceptions.ClientError) as wrong:
        s3.complete_multipart_upload(Bucket="data", Key="mp", UploadId=up, MultipartUpload={"Parts": parts})
    assert code(wrong) == "InvalidPart"
    etag2 = s3.list_parts(Bucket="data", Key="mp", UploadId=up)["Parts"][1]["ETag"]
    parts[1]["ETag"] = etag2
    with pytest.raises(botocore.exceptions.ClientError) as tiny:
        s3.complete_multipart_upload(Bucket="data", Key="mp", UploadId=up, MultipartUpload={"Parts": parts})
    assert code(tiny) == "EntityTooSmall"
    s3.abort_multipart_upload(Bucket="data", Key="mp", UploadId=up)
    with pytest.raises(botocore.exceptions.ClientError) as gone:
        s3.list_parts(Bucket="data", Key="mp", UploadId=up)
    assert code(gone) == "NoSuchUpload"


def test_copy_delete_many_and_delete_bucket(s3: Any) -> None:
    s3.put_object(Bucket="data", Key="src", Body=b"v", Metadata={"k": "1"})
    s3.copy_object(Bucket="data", Key="dst", CopySource={"Bucket": "data", "Key": "src"})
    assert s3.get_object(Bucket="data", Key="dst")["Metadata"] == {"k": "1"}
    with pytest.raises(botocore.exceptions.ClientError) as full:
        s3.delete_bucket(Bucket="data")
    assert code(full) == "BucketNotEmpty"
    deleted = s3.delete_objects(Bucket="data", Delete={"Objects": [{"Key": "src"}, {"Key": "dst"}]})["Deleted"]
    assert sorted(d["Key"] for d in deleted) == ["dst", "src"]
    s3.delete_bucket(Bucket="data")
    assert "data" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]


def test_malformed_xml_is_malformed_xml(service: S3Service, s3: Any) -> None:
    up = s3.create_multipart_upload(Bucket="data", Key="mp")["UploadId"]

    def garble(request: Any, **_: Any) -> None:
        request.data = b"<CompleteMultipartUpload><Part>"

    s3.meta.events.register_first("before-sign.s3.CompleteMultipartUpload", garble)
    with pytest.raises(botocore.exceptions.ClientError) as bad:
        s3.complete_multipart_upload(Bucket="data", Key="mp", UploadId=up, MultipartUpload={"Parts": []})
    assert code(bad) == "MalformedXML"


def test_presigned_urls_in_both_signature_forms(service: S3Service, s3: Any, creds: Credentials) -> None:
    s3.put_object(Bucket="data", Key="p/x.txt", Body=b"shared")
    for client in (s3, asgi_client(service, "s3", creds.admin, Config(signature_version="s3v4"))):
        url = client.generate_presigned_url("get_object", Params={"Bucket": "data", "Key": "p/x.txt"}, ExpiresIn=60)
        raw = url.split("127.0.0.1:8765", 1)[1]
        status, _, body = asgi_call(service, "GET", raw, {"Host": "127.0.0.1:8765"}, b"")
        assert (status, body) == (200, b"shared")
        tampered = raw.replace("x.txt", "y.txt")
        assert asgi_call(service, "GET", tampered, {"Host": "127.0.0.1:8765"}, b"")[0] == 403


def test_an_expired_presigned_url_is_refused(home: Path, creds: Credentials) -> None:
    skew = [0.0]  # the verifier's clock runs ahead of the signer's by this much
    service = S3Service(ObjectStore(home / "s3"), Verifier(creds, clock=lambda: time.time() + skew[0]))
    s3 = asgi_client(service, "s3", creds.admin, Config(signature_version="s3v4"))
    url = s3.generate_presigned_url("list_buckets", ExpiresIn=10)
    raw = url.split("127.0.0.1:8765", 1)[1]
    assert asgi_call(service, "GET", raw, {"Host": "127.0.0.1:8765"}, b"")[0] == 200
    skew[0] = 11.0  # past its ten seconds
    status, _, body = asgi_call(service, "GET", raw, {"Host": "127.0.0.1:8765"}, b"")
    assert status == 403 and b"expired" in body


def test_an_invoke_key_and_a_wrong_secret_are_refused(service: S3Service, creds: Credentials) -> None:
    invoke = creds.add_key("invoke", "app")
    with pytest.raises(botocore.exceptions.ClientError) as denied:
        asgi_client(service, "s3", invoke).list_buckets()
    assert code(denied) == "AccessDenied"
    forged = type(invoke)(creds.admin.access_key_id, "not-the-secret")
    with pytest.raises(botocore.exceptions.ClientError) as bad:
        asgi_client(service, "s3", forged).list_buckets()
    assert code(bad) == "SignatureDoesNotMatch"


def test_operations_servekit_does_not_serve_say_so(s3: Any) -> None:
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.get_bucket_tagging(Bucket="data")
    assert code(exc) == "NotImplemented" and "GetBucketTagging" in exc.value.response["Error"]["Message"]


def test_aws_chunked_bodies_with_trailing_checksums_as_botocore_sends_them_over_https(
    service: S3Service, creds: Credentials, home: Path
) -> None:
    s3 = asgi_client(service, "s3", creds.admin, endpoint_url="https://127.0.0.1:8765")
    s3.create_bucket(Bucket="tls")
    sent: list[dict[str, str]] = []
    s3.meta.events.register_first("before-send.s3.PutObject", lambda request, **_: sent.append(dict(request.headers)))
    data = b"chunked payload " * 5000
    out = s3.put_object(Bucket="tls", Key="c.bin", Body=io.BytesIO(data))
    assert sent[0].get("Content-Encoding") in (b"aws-chunked", "aws-chunked")  # the path under test was taken
    assert (home / "s3" / "tls" / "c.bin").read_bytes() == data
    assert out["ChecksumCRC32"] == base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def test_virtual_host_style_requests_name_the_bucket_in_the_host(service: S3Service, creds: Credentials) -> None:
    virtual = Config(s3={"addressing_style": "virtual"})
    s3 = asgi_client(service, "s3", creds.admin, virtual, endpoint_url="http://localhost:8765")
    sent: list[str] = []
    s3.meta.events.register_first("before-send.s3", lambda request, **_: sent.append(request.url))
    s3.create_bucket(Bucket="vhost")
    s3.put_object(Bucket="vhost", Key="k/v.txt", Body=b"virtual")
    assert s3.get_object(Bucket="vhost", Key="k/v.txt")["Body"].read() == b"virtual"
    assert sent[-1].startswith("http://vhost.localhost:8765/k/v.txt")  # the style under test was used


def test_a_refused_put_leaves_no_body_behind(s3: Any, home: Path) -> None:
    """A PUT to a bucket that does not exist is refused before its body is stored, and a body refused after it
    was (a wrong Content-MD5, a part of an unknown upload) is removed: nothing piles up in the store's .tmp."""
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.put_object(Bucket="no-such-bucket", Key="k", Body=b"x" * 100_000)
    assert code(exc) == "NoSuchBucket"
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.put_object(Bucket="data", Key="k", Body=b"abc", ContentMD5=base64.b64encode(b"0" * 16).decode())
    assert code(exc) in ("BadDigest", "InvalidDigest")
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        s3.upload_part(Bucket="data", Key="k", UploadId="nope", PartNumber=1, Body=b"abc")
    assert code(exc) == "NoSuchUpload"
    assert list((home / "s3" / ".tmp").iterdir()) == []
    s3.put_object(Bucket="data", Key="k", Body=b"fine")  # and a good one still lands
    assert list((home / "s3" / ".tmp").iterdir()) == []


def test_keys_over_1024_bytes_and_reserved_bucket_names_are_refused(s3: Any) -> None:
    s3.put_object(Bucket="data", Key="é" * 512, Body=b"x")  # 1,024 bytes: the longest key
    for key in ("é" * 513, "k" * 60_000):
        with pytest.raises(botocore.exceptions.ClientError) as exc:
            s3.put_object(Bucket="data", Key=key, Body=b"x")
        assert code(exc) == "KeyTooLongError"
    for name in ("xn--abc", "abc-s3alias", "sthree-x", "logs--ol-s3"):
        with pytest.raises(botocore.exceptions.ClientError) as exc:
            s3.create_bucket(Bucket=name)
        assert code(exc) == "InvalidBucketName", name
