"""aws-chunked bodies signed chunk by chunk (STREAMING-AWS4-HMAC-SHA256-PAYLOAD): each chunk's signature chains
from the request's; a forged chunk or a broken frame is refused and leaves no file."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from servekit.aws.credentials import new_key
from servekit.aws.sigv4 import S3Signed, signing_key
from servekit.services.s3.body import EMPTY_SHA256, receive
from servekit.services.s3.store import StoreError

KEY = new_key()
DATE, SCOPE = "20261201T120000Z", "20261201/us-east-1/s3/aws4_request"
SKEY = signing_key(KEY.secret_access_key, "20261201", "us-east-1", "s3")
SEED = "a" * 64


def signed_body(chunks: list[bytes], forge: int | None = None) -> bytes:
    out, previous = b"", SEED
    for i, data in enumerate([*chunks, b""]):
        to_sign = "\n".join(
            ["AWS4-HMAC-SHA256-PAYLOAD", DATE, SCOPE, previous, EMPTY_SHA256, hashlib.sha256(data).hexdigest()]
        )
        sig = hmac.new(SKEY, to_sign.encode(), hashlib.sha256).hexdigest()
        previous = sig
        if i == forge:
            sig = "0" * 64
        out += f"{len(data):x};chunk-signature={sig}\r\n".encode() + data + b"\r\n"
    return out


async def pieces(body: bytes, size: int = 7) -> AsyncIterator[bytes]:
    for i in range(0, len(body), size):  # split anywhere, as a socket does
        yield body[i : i + size]


def run(body: bytes, path: Path) -> int:
    signed = S3Signed(KEY, "STREAMING-AWS4-HMAC-SHA256-PAYLOAD", SEED, DATE, SCOPE, SKEY)
    headers = {"content-encoding": "aws-chunked", "x-amz-decoded-content-length": str(len(b"hello world!" * 3))}
    return asyncio.run(receive(pieces(body), path, headers, signed, 1 << 20)).size


def test_signed_chunks_decode_to_the_payload(tmp_path: Path) -> None:
    target = tmp_path / "obj"
    assert run(signed_body([b"hello world!"] * 3), target) == 36
    assert target.read_bytes() == b"hello world!" * 3


def test_a_forged_chunk_signature_is_refused_and_leaves_no_file(tmp_path: Path) -> None:
    target = tmp_path / "obj"
    with pytest.raises(StoreError) as err:
        run(signed_body([b"hello world!"] * 3, forge=1), target)
    assert err.value.code == "SignatureDoesNotMatch"
    assert not target.exists()


@pytest.mark.parametrize("frame", [b"zz\r\nabc\r\n0\r\n\r\n", b"-1\r\n", b"5;chunk-signature=x\r\nab", b"f" * 5000])
def test_broken_frames_are_client_errors(tmp_path: Path, frame: bytes) -> None:
    with pytest.raises(StoreError) as err:
        run(frame, tmp_path / "obj")
    assert err.value.status in (400, 403) and err.value.code in (
        "InvalidChunkSizeError",
        "IncompleteBody",
        "SignatureDoesNotMatch",
        "EntityTooLarge",
    )
    assert not (tmp_path / "obj").exists()


def test_a_body_over_the_limit_is_entity_too_large_and_leaves_no_file(tmp_path: Path) -> None:
    target = tmp_path / "obj"
    signed = S3Signed(KEY, "UNSIGNED-PAYLOAD", SEED, DATE, SCOPE, SKEY)
    with pytest.raises(StoreError) as err:
        asyncio.run(receive(pieces(b"x" * 1000, 100), target, {}, signed, 999))
    assert (err.value.code, err.value.status) == ("EntityTooLarge", 400)
    assert not target.exists()
