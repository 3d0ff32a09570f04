"""Bytes in and out of the S3 API: small request bodies read whole, ranges parsed, objects copied and assembled
durably, files streamed back."""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

from starlette.types import Receive, Send

from servekit.aws.sigv4 import S3Signed
from servekit.services.s3.store import StoreError

MAX_XML = 2 * 2**20
_SEND = 1024 * 1024


def parse_range(text: str, size: int) -> tuple[int, int] | None:
    """``bytes=a-b`` → (start, end inclusive); None when the header is not one S3 honours (whole object)."""
    m = re.fullmatch(r"\s*bytes=(\d*)-(\d*)\s*", text)
    if not m or (not m.group(1) and not m.group(2)):
        return None
    if not m.group(1):  # the last n bytes
        n = int(m.group(2))
        if n == 0:
            raise StoreError("InvalidRange", "The requested range is not satisfiable", 416)
        return max(0, size - n), size - 1
    start = int(m.group(1))
    end = int(m.group(2)) if m.group(2) else size - 1
    if start >= size or end < start:
        raise StoreError("InvalidRange", "The requested range is not satisfiable", 416)
    return start, min(end, size - 1)


def copy_durably(source: Path, target: Path) -> None:
    with source.open("rb") as src, target.open("wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
        dst.flush()
        os.fsync(dst.fileno())


def assemble(parts: list[Path], target: Path) -> None:
    with target.open("wb") as dst:
        for part in parts:
            with part.open("rb") as src:
                size = os.fstat(src.fileno()).st_size
                offset = 0
                while offset < size:  # in the kernel where it can (copy_file_range), else through a buffer
                    try:
                        n = os.copy_file_range(src.fileno(), dst.fileno(), size - offset)
                    except OSError:
                        src.seek(offset)
                        shutil.copyfileobj(src, dst, 1 << 20)
                        break
                    if n == 0:
                        break
                    offset += n
        dst.flush()
        os.fsync(dst.fileno())


async def small_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    size = 0
    more = True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise StoreError("IncompleteBody", "The client closed the connection before the body ended")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_XML:
            raise StoreError("MaxMessageLengthExceeded", f"Your request was too big (over {MAX_XML} bytes).")
        chunks.append(chunk)
        more = message.get("more_body", False)
    return b"".join(chunks)


def check_small(body: bytes, signed: S3Signed | None) -> None:
    if signed is None or signed.payload.startswith("STREAMING-") or signed.payload == "UNSIGNED-PAYLOAD":
        return
    if hashlib.sha256(body).hexdigest() != signed.payload.lower():
        raise StoreError(
            "XAmzContentSHA256Mismatch", "The provided 'x-amz-content-sha256' header does not match what was computed."
        )


def encode_headers(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode("latin-1"), v.encode("utf-8")) for k, v in headers.items()]


async def send_file(send: Send, path: Path, start: int, end: int) -> None:
    """Bytes ``start..end`` of ``path`` as the response body; a small object is read on the loop, larger ones in a
    worker thread a block at a time (a disk read never holds the loop)."""
    remaining = end - start + 1
    with path.open("rb") as f:
        f.seek(start)
        while remaining > 0:
            n = min(_SEND, remaining)
            data = f.read(n) if remaining <= _SEND else await asyncio.to_thread(f.read, n)
            if not data:
                break
            remaining -= len(data)
            await send({"type": "http.response.body", "body": data, "more_body": remaining > 0})
    if remaining > 0:  # the file shrank under us (it cannot: objects are replaced by rename); end the body
        await send({"type": "http.response.body", "body": b""})


def copy_range(source: Path, target: Path, start: int, end: int) -> bytes:
    """Bytes ``start``..``end`` (inclusive) of ``source`` into ``target``, flushed to disk; their MD5 (the ETag of a
    part UploadPartCopy makes)."""
    digest = hashlib.md5(usedforsecurity=False)
    with source.open("rb") as src, target.open("wb") as dst:
        src.seek(start)
        left = end - start + 1
        while left > 0:
            chunk = src.read(min(1 << 20, left))
            if not chunk:
                break
            digest.update(chunk)
            dst.write(chunk)
            left -= len(chunk)
        dst.flush()
        os.fsync(dst.fileno())
    return digest.digest()


def copy_source_range(header: str | None, size: int) -> tuple[int, int]:
    """``x-amz-copy-source-range`` (``bytes=first-last``, within the source) as (first, last); the whole source
    when absent. StoreError ``InvalidArgument`` otherwise, as S3 answers."""
    if not header:
        return 0, size - 1
    m = re.fullmatch(r"bytes=(\d+)-(\d+)", header.strip())
    if m is None or int(m[1]) > int(m[2]) or int(m[2]) >= size:
        raise StoreError(
            "InvalidArgument",
            f"The x-amz-copy-source-range value must be of the form bytes=first-last where first and last are the "
            f"zero-based offsets of the first and last bytes to copy, within the source's {size} bytes: {header}",
        )
    return int(m[1]), int(m[2])
