"""Request bodies of PutObject and UploadPart, streamed to a temporary file: ``aws-chunked`` framing decoded (its
chunk and trailer signatures checked when signed), the MD5 (the ETag), the SHA-256 the signature claimed and the
flexible checksums (``x-amz-checksum-*``, in a header or a trailer) computed on the way and verified at the end.
Nothing reaches the object's path unless every check passed (the caller commits the file only then)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import os
import zlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from servekit.aws.sigv4 import S3Signed
from servekit.services.s3.store import StoreError

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_BATCH = 1 << 20
CHECKSUMS = ("crc32", "crc32c", "crc64nvme", "sha1", "sha256")
_MAX_CHUNK_LINE = 4096


class _Crc32:
    def __init__(self) -> None:
        self.value = 0

    def update(self, data: bytes) -> None:
        self.value = zlib.crc32(data, self.value)

    def digest(self) -> bytes:
        return self.value.to_bytes(4, "big")


class _Crc32c:
    def __init__(self) -> None:
        try:
            import google_crc32c  # type: ignore[import-not-found]
        except ImportError:
            raise StoreError(
                "InvalidRequest", "CRC32C checksums need the google-crc32c package on the servekit up machine"
            ) from None
        self._c = google_crc32c.Checksum()

    def update(self, data: bytes) -> None:
        self._c.update(data)

    def digest(self) -> bytes:
        return bytes(self._c.digest())


class _Crc64Nvme:
    """CRC-64/NVME, the checksum the AWS SDKs send by default since 2025 (pyarrow's S3 client in a trailer), with
    awscrt's C implementation, as botocore computes it."""

    def __init__(self) -> None:
        try:
            from awscrt import checksums  # type: ignore[import-untyped]
        except ImportError:
            raise StoreError(
                "InvalidRequest", "CRC64NVME checksums need the awscrt package on the servekit up machine"
            ) from None
        self._crc64 = checksums.crc64nvme
        self.value = 0

    def update(self, data: bytes) -> None:
        self.value = self._crc64(data, self.value)

    def digest(self) -> bytes:
        return self.value.to_bytes(8, "big")


def hasher(algorithm: str) -> Any:
    if algorithm == "crc32":
        return _Crc32()
    if algorithm == "crc32c":
        return _Crc32c()
    if algorithm == "crc64nvme":
        return _Crc64Nvme()
    if algorithm in ("sha1", "sha256"):
        return hashlib.new(algorithm)
    raise StoreError("InvalidRequest", f"Checksum algorithm {algorithm.upper()} is not supported here")


@dataclass
class Received:
    """A body written to ``path``: its size, MD5 and the verified checksums (algorithm -> base64)."""

    path: Path
    size: int
    md5: bytes
    checksums: dict[str, str] = field(default_factory=dict)


def wanted_checksums(headers: Mapping[str, str]) -> dict[str, str | None]:
    """Algorithm -> the value the header claims (None: it comes in the trailer, or only the algorithm was named)."""
    out: dict[str, str | None] = {}
    for algo in CHECKSUMS:
        if f"x-amz-checksum-{algo}" in headers:
            out[algo] = headers[f"x-amz-checksum-{algo}"]
    trailer = headers.get("x-amz-trailer", "").strip().lower()
    if trailer:
        if not trailer.startswith("x-amz-checksum-") or trailer.removeprefix("x-amz-checksum-") not in CHECKSUMS:
            raise StoreError("InvalidRequest", f"The trailer {trailer} is not supported")
        out.setdefault(trailer.removeprefix("x-amz-checksum-"), None)
    named = headers.get("x-amz-sdk-checksum-algorithm", "").strip().lower()
    if named and named in CHECKSUMS:
        out.setdefault(named, None)
    return out


class _Sink:
    """Writes and hashes in a worker thread, a megabyte at a time, so a large upload never holds the event loop
    (other requests, InvokeEndpoint among them, share it)."""

    def __init__(self, out: BinaryIO, limit: int, algorithms: list[str], sha256: bool) -> None:
        self.out = out
        self.limit = limit
        self.size = 0
        self.pending = bytearray()
        self.md5 = hashlib.md5(usedforsecurity=False)
        self.sha256 = hashlib.sha256() if sha256 else None
        self.sums = {a: hasher(a) for a in algorithms}

    async def write(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.limit:
            raise StoreError("EntityTooLarge", f"Your proposed upload exceeds the maximum allowed size ({self.limit})")
        self.pending += data
        if len(self.pending) >= _BATCH:
            await self.flush()

    async def flush(self) -> None:
        if self.pending:
            block = bytes(self.pending)
            self.pending.clear()
            await asyncio.to_thread(self._consume, block)

    def _consume(self, data: bytes) -> None:  # hashlib and zlib release the GIL on blocks this size
        self.out.write(data)
        self.md5.update(data)
        if self.sha256 is not None:
            self.sha256.update(data)
        for h in self.sums.values():
            h.update(data)


async def receive(
    chunks: AsyncIterator[bytes], path: Path, headers: Mapping[str, str], signed: S3Signed | None, limit: int
) -> Received:
    """Write the body to ``path`` (fsynced) and verify it; raises :class:`StoreError` (the file is removed)."""
    claims = wanted_checksums(headers)
    mode = signed.payload if signed is not None else "UNSIGNED-PAYLOAD"
    chunked = mode.startswith("STREAMING-") or "aws-chunked" in headers.get("content-encoding", "")
    hex_claim = None if chunked or mode == "UNSIGNED-PAYLOAD" else mode.lower()
    declared = headers.get("x-amz-decoded-content-length")
    try:
        with path.open("wb") as f:
            sink = _Sink(f, limit, list(claims), hex_claim is not None)
            trailers: dict[str, str] = {}
            if chunked:
                trailers = await _dechunk(chunks, sink, mode, signed)
            else:
                async for data in chunks:
                    await sink.write(data)
            await sink.flush()
            await asyncio.to_thread(_sync, f)
        if declared is not None and declared.isdigit() and int(declared) != sink.size:
            raise StoreError("IncompleteBody", "The body is shorter or longer than x-amz-decoded-content-length")
        if hex_claim is not None and sink.sha256 is not None and sink.sha256.hexdigest() != hex_claim:
            raise StoreError(
                "XAmzContentSHA256Mismatch",
                "The provided 'x-amz-content-sha256' header does not match what was computed.",
            )
        verified: dict[str, str] = {}
        for algo, h in sink.sums.items():
            value = base64.b64encode(h.digest()).decode()
            claimed = claims[algo] or trailers.get(f"x-amz-checksum-{algo}")
            if claimed is not None and claimed.strip() != value:
                raise StoreError(
                    "BadDigest", f"The {algo.upper()} you specified did not match the calculated checksum."
                )
            verified[algo] = value
        return Received(path, sink.size, sink.md5.digest(), verified)
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def _sync(f: BinaryIO) -> None:
    f.flush()
    os.fsync(f.fileno())


async def _dechunk(chunks: AsyncIterator[bytes], sink: _Sink, mode: str, signed: S3Signed | None) -> dict[str, str]:
    """Decode ``aws-chunked`` into ``sink``; returns the trailer headers."""
    verify = signed is not None and mode.startswith("STREAMING-AWS4-HMAC-SHA256-PAYLOAD")
    previous = signed.seed_signature if signed is not None else ""
    buf = bytearray()
    it = chunks.__aiter__()
    ended = False

    async def fill(n: int) -> bool:
        nonlocal ended
        while len(buf) < n and not ended:
            try:
                buf.extend(await it.__anext__())
            except StopAsyncIteration:
                ended = True
        return len(buf) >= n

    async def line() -> bytes:
        while b"\r\n" not in buf:
            if len(buf) > _MAX_CHUNK_LINE:
                raise StoreError("InvalidChunkSizeError", "An aws-chunked header line is too long")
            if not await fill(len(buf) + 1):
                raise StoreError("IncompleteBody", "The aws-chunked body ended inside a chunk header")
        i = buf.index(b"\r\n")
        out = bytes(buf[:i])
        del buf[: i + 2]
        return out

    while True:
        header = (await line()).decode("latin-1")
        size_text, _, ext = header.partition(";")
        try:
            size = int(size_text.strip(), 16)
        except ValueError:
            raise StoreError("InvalidChunkSizeError", f"Invalid aws-chunked size {size_text[:32]!r}") from None
        if size < 0:
            raise StoreError("InvalidChunkSizeError", "Negative aws-chunked size")
        if size > sink.limit:
            raise StoreError("EntityTooLarge", "An aws-chunked chunk exceeds the maximum allowed size")
        if not await fill(size + (2 if size else 0)):
            raise StoreError("IncompleteBody", "The aws-chunked body ended inside a chunk")
        data = bytes(buf[:size])
        if verify and signed is not None:
            claimed = ext.strip().removeprefix("chunk-signature=")
            to_sign = "\n".join(
                [
                    "AWS4-HMAC-SHA256-PAYLOAD",
                    signed.amz_date,
                    signed.scope,
                    previous,
                    EMPTY_SHA256,
                    hashlib.sha256(data).hexdigest(),
                ]
            )
            expected = hmac.new(signed.signing_key, to_sign.encode(), hashlib.sha256).hexdigest()
            if not hmac.compare_digest(expected, claimed):
                raise StoreError("SignatureDoesNotMatch", "An aws-chunked chunk signature does not match", 403)
            previous = expected
        if size == 0:
            break
        if buf[size : size + 2] != b"\r\n":
            raise StoreError("IncompleteBody", "An aws-chunked chunk is not followed by CRLF")
        del buf[: size + 2]
        await sink.write(data)
    trailers: dict[str, str] = {}
    raw: list[bytes] = []
    while True:
        text = await line()
        if not text:
            break
        name, _, value = text.decode("latin-1").partition(":")
        if name.strip().lower() == "x-amz-trailer-signature":
            if verify and signed is not None:
                to_sign = "\n".join(
                    [
                        "AWS4-HMAC-SHA256-TRAILER",
                        signed.amz_date,
                        signed.scope,
                        previous,
                        hashlib.sha256(b"".join(r + b"\n" for r in raw)).hexdigest(),
                    ]
                )
                expected = hmac.new(signed.signing_key, to_sign.encode(), hashlib.sha256).hexdigest()
                if not hmac.compare_digest(expected, value.strip()):
                    raise StoreError("SignatureDoesNotMatch", "The aws-chunked trailer signature does not match", 403)
            continue
        raw.append(text)
        trailers[name.strip().lower()] = value.strip()
    return trailers
