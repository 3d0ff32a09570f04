"""S3 on ``servekit up``'s port: an ASGI app over :class:`~servekit.services.s3.store.ObjectStore`.

It is not one of the buffered JSON services: object bodies stream to disk as they arrive (a 5 GB PUT never sits in
memory) and GetObject streams the file back. The request's SigV4 signature is checked from its headers before the
body is read (the signature covers the claimed payload hash, checked against the bytes at the end). Operations are
found and their parameters read from botocore's ``s3`` model (:mod:`servekit.services.s3.wire`); errors are S3's XML
codes. Path-style (``/<bucket>/<key>``) and virtual-host-style (``<bucket>.localhost``) requests both work.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import UTC, datetime
from email.utils import format_datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from starlette.types import Receive, Scope, Send

from servekit.aws import xml
from servekit.aws.credentials import authorize
from servekit.aws.errors import ApiError
from servekit.aws.protocol import request_id
from servekit.aws.sigv2 import is_v2_presigned, verify_v2_query
from servekit.aws.sigv4 import S3Signed, Verifier, verify_s3
from servekit.services.s3 import wire
from servekit.services.s3.body import CHECKSUMS
from servekit.services.s3.body import receive as receive_body
from servekit.services.s3.encryption import BucketSettings, KmsArn, reported
from servekit.services.s3.names import (
    MAX_KEY_BYTES,
    RESERVED_PREFIXES,
    RESERVED_SUFFIXES,
    permissions,
    valid_bucket_name,
)
from servekit.services.s3.store import ObjectInfo, ObjectStore, StoreError, Upload
from servekit.services.s3.transfer import (
    assemble,
    check_small,
    copy_durably,
    copy_range,
    copy_source_range,
    encode_headers,
    parse_range,
    send_file,
    small_body,
)

log = logging.getLogger(__name__)

MAX_OBJECT = 5 * 2**30  # S3's largest single PUT and largest part
MIN_PART = 5 * 2**20  # every part but the last
_STREAMED = {"PutObject", "UploadPart"}
_OWNER = {"ID": "servekit", "DisplayName": "servekit"}
_KEPT_HEADERS = ("CacheControl", "ContentDisposition", "ContentEncoding", "ContentLanguage")


def is_s3_request(scope: Scope) -> bool:
    """Whether an HTTP request is for S3: signed for the ``s3`` service (header or presigned query)."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            return b"/s3/aws4_request" in value
    query = scope.get("query_string", b"")
    if b"AWSAccessKeyId=" in query and b"Signature=" in query:  # a presigned URL in the HMAC-SHA1 form: S3 only
        return True
    return b"X-Amz-Credential=" in query and (b"%2Fs3%2Faws4_request" in query or b"/s3/aws4_request" in query)


def _http_date(t: float) -> str:
    return format_datetime(datetime.fromtimestamp(t, UTC), usegmt=True)


class S3Service:
    """The S3 operations servekit answers, and the ASGI app that speaks them."""

    def __init__(
        self, store: ObjectStore, verifier: Verifier | None, region: str = "us-east-1", kms: KmsArn | None = None
    ) -> None:
        """``kms``: the plane's KMS, which names the keys ``aws:kms`` encryption uses (None: only AES256)."""
        self.store = store
        self.verifier = verifier
        self.region = region
        self.settings = BucketSettings(store, kms)
        self._ops: dict[str, Callable[..., Any]] = {
            "ListBuckets": self.list_buckets,
            "CreateBucket": self.create_bucket,
            "HeadBucket": self.head_bucket,
            "DeleteBucket": self.delete_bucket,
            "GetBucketLocation": self.get_bucket_location,
            "PutObject": self.put_object,
            "GetObject": self.get_object,
            "HeadObject": self.head_object,
            "DeleteObject": self.delete_object,
            "DeleteObjects": self.delete_objects,
            "CopyObject": self.copy_object,
            "ListObjectsV2": self.list_objects_v2,
            "ListObjects": self.list_objects,
            "CreateMultipartUpload": self.create_multipart_upload,
            "UploadPart": self.upload_part,
            "UploadPartCopy": self.upload_part_copy,
            "CompleteMultipartUpload": self.complete_multipart_upload,
            "AbortMultipartUpload": self.abort_multipart_upload,
            "ListParts": self.list_parts,
            "ListMultipartUploads": self.list_multipart_uploads,
            **self.settings.handlers(),
        }

    # ---- the ASGI app --------------------------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        rid = request_id()
        method = scope["method"]
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        bucket, key = self._address(scope, headers)
        try:
            raw_path = scope.get("raw_path", b"").decode("latin-1") or quote(scope["path"])
            query = scope.get("query_string", b"").decode("latin-1")
            signed = self._authenticate(method, raw_path + ("?" + query if query else ""), headers)
            params_q = wire.query_dict(query)
            op = wire.match(method, bool(bucket), key is not None, params_q, headers)
            if op is None and not bucket:
                raise StoreError("MethodNotAllowed", "The specified method is not allowed against this resource", 405)
            if op is None or op.name not in self._ops:
                name = op.name if op is not None else f"{method} {'object' if key else 'bucket'} request"
                raise StoreError("NotImplemented", f"servekit's S3 does not implement {name}", 501)
            self._authorize(signed, op.name, bucket, key, headers)
            params = wire.parameters(op, bucket, key, params_q, headers)
            if key is not None and len(key.encode()) > MAX_KEY_BYTES:
                raise StoreError("KeyTooLongError", f"Your key is too long: at most {MAX_KEY_BYTES} bytes")
            if op.name in _STREAMED:
                self.store.require_bucket(bucket)  # before a byte of the body is stored
                params["_body"] = await self._stream_in(receive, headers, signed)
            else:
                body = await small_body(receive)
                check_small(body, signed)
                params.update(wire.parse_payload(op, body))
            try:
                result = await self._ops[op.name](params)
            finally:  # a refused body leaves nothing behind (a stored one was renamed away already)
                if "_body" in params:
                    params["_body"].path.unlink(missing_ok=True)
            await self._respond(send, op, result, method, rid)
        except (StoreError, ApiError) as exc:
            status = exc.status if isinstance(exc, StoreError) else (exc.status or 400)
            code, message = exc.code, exc.message
            if code in ("MissingAuthenticationTokenException", "IncompleteSignatureException"):
                code = "AccessDenied" if status == 403 else "AuthorizationHeaderMalformed"
            elif code == "InvalidSignatureException":
                code = "SignatureDoesNotMatch"
            elif code in ("AccessDeniedException", "UnrecognizedClientException"):
                code = "AccessDenied" if code == "AccessDeniedException" else "InvalidAccessKeyId"
            await self._error(send, status, code, message, rid, method, f"/{bucket}/{key or ''}")
        except Exception:
            log.exception("S3 request failed (%s %s)", method, scope.get("path"))
            await self._error(
                send, 500, "InternalError", "We encountered an internal error. Please try again.", rid, method, None
            )

    def _address(self, scope: Scope, headers: Mapping[str, str]) -> tuple[str, str | None]:
        path: str = scope["path"]
        host = headers.get("host", "").rsplit(":", 1)[0] if not headers.get("host", "").startswith("[") else ""
        if host.endswith(".localhost"):  # virtual-host style: <bucket>.localhost:<port>/<key>
            bucket = host.removesuffix(".localhost")
            key = path[1:] or None
            return bucket, key
        bucket, _, rest = path[1:].partition("/")
        return bucket, (rest if rest else None)

    def _authenticate(self, method: str, raw_path: str, headers: Mapping[str, str]) -> S3Signed | None:
        if self.verifier is None:
            return None
        if is_v2_presigned(raw_path.partition("?")[2]):
            key = verify_v2_query(self.verifier.keys, self.verifier.clock, method, raw_path, headers)
            signed = S3Signed(key, "UNSIGNED-PAYLOAD", "", "", "", b"")
        else:
            signed = verify_s3(self.verifier, method, raw_path, headers)
        return signed

    @staticmethod
    def _authorize(signed: S3Signed | None, op: str, bucket: str, key: str | None, headers: Mapping[str, str]) -> None:
        """What the caller's key must be allowed for ``op`` (IAM's S3 actions on bucket and object ARNs; a role
        session's key by its policy, the home's keys by their scope)."""
        if signed is None:
            return
        try:
            for action, resource in permissions(op, bucket, key, headers):
                authorize(signed.key, "admin", action, resource)
        except ApiError as exc:
            raise StoreError("AccessDenied", exc.message, 403) from None

    async def _stream_in(self, receive: Receive, headers: Mapping[str, str], signed: S3Signed | None) -> Any:
        path = self.store.temp_path()

        async def chunks() -> AsyncIterator[bytes]:
            more = True
            while more:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise StoreError("IncompleteBody", "The client closed the connection before the body ended")
                yield message.get("body", b"")
                more = message.get("more_body", False)

        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > MAX_OBJECT + 2**20:
            raise StoreError("EntityTooLarge", f"Your proposed upload exceeds the maximum allowed size ({MAX_OBJECT})")
        return await receive_body(chunks(), path, headers, signed, MAX_OBJECT)

    async def _respond(self, send: Send, op: Any, result: Mapping[str, Any], method: str, rid: str) -> None:
        status, headers, body = wire.response(op, result)
        status = int(result.get("StatusCode", status))
        stream: tuple[Path, int, int] | None = result.get("_stream")
        headers = {**headers, "x-amz-request-id": rid}
        if op.name == "GetBucketLocation":
            loc = result.get("LocationConstraint") or ""
            body = xml.element("LocationConstraint", {}, wire.NAMESPACE).replace(
                b"/>", (f">{loc}</LocationConstraint>".encode() if loc else b"/>")
            )
        if body is None:  # GetObject: the file's bytes
            assert stream is not None
            path, start, end = stream
            headers["Content-Length"] = str(end - start + 1 if end >= start else 0)
            await send({"type": "http.response.start", "status": status, "headers": encode_headers(headers)})
            if method != "HEAD":
                await send_file(send, path, start, end)
            else:
                await send({"type": "http.response.body", "body": b""})
            return
        if method == "HEAD":
            headers.setdefault("Content-Length", "0")
            body = b""
        else:
            headers["Content-Length"] = str(len(body))
        await send({"type": "http.response.start", "status": status, "headers": encode_headers(headers)})
        await send({"type": "http.response.body", "body": body})

    async def _error(
        self, send: Send, status: int, code: str, message: str, rid: str, method: str, resource: str | None
    ) -> None:
        body = b"" if method == "HEAD" or status == 304 else wire.error_body(code, message, rid, resource)
        headers = {"Content-Type": "application/xml", "Content-Length": str(len(body)), "x-amz-request-id": rid}
        await send({"type": "http.response.start", "status": status, "headers": encode_headers(headers)})
        await send({"type": "http.response.body", "body": body})

    # ---- buckets -------------------------------------------------------------------------------------------------
    async def list_buckets(self, p: dict[str, Any]) -> dict[str, Any]:
        buckets = [{"Name": n, "CreationDate": datetime.fromtimestamp(c, UTC)} for n, c in self.store.buckets()]
        return {"Buckets": buckets, "Owner": _OWNER}

    async def create_bucket(self, p: dict[str, Any]) -> dict[str, Any]:
        name = p["Bucket"]
        if not valid_bucket_name(name):
            raise StoreError(
                "InvalidBucketName",
                f"The specified bucket is not valid: {name!r} (3-63 lowercase "
                "letters, digits, dots and hyphens, starting and ending with a letter or digit, not starting with "
                f"{', '.join(RESERVED_PREFIXES)} nor ending with {', '.join(RESERVED_SUFFIXES)})",
            )
        if not self.store.create_bucket(name):
            raise StoreError(
                "BucketAlreadyOwnedByYou",
                "Your previous request to create the named bucket succeeded and you already own it.",
                409,
            )
        return {"Location": f"/{name}"}

    async def head_bucket(self, p: dict[str, Any]) -> dict[str, Any]:
        self.store.require_bucket(p["Bucket"])
        return {"BucketRegion": self.region}

    async def delete_bucket(self, p: dict[str, Any]) -> dict[str, Any]:
        await asyncio.to_thread(self.store.delete_bucket, p["Bucket"])
        return {}

    async def get_bucket_location(self, p: dict[str, Any]) -> dict[str, Any]:
        self.store.require_bucket(p["Bucket"])
        return {"LocationConstraint": None if self.region == "us-east-1" else self.region}

    # ---- objects -------------------------------------------------------------------------------------------------
    def _info(
        self, p: Mapping[str, Any], size: int, etag: str, checksums: dict[str, str], parts: int = 0
    ) -> ObjectInfo:
        return ObjectInfo(
            p["Bucket"],
            p["Key"],
            size,
            etag,
            0.0,
            p.get("ContentType") or "binary/octet-stream",
            {
                **{k: str(p[k]) for k in _KEPT_HEADERS if p.get(k) and not str(p[k]).startswith("aws-chunked")},
                **self.settings.encryption(p),
            },
            dict(p.get("Metadata") or {}),
            checksums,
            parts,
        )

    async def put_object(self, p: dict[str, Any]) -> dict[str, Any]:
        body = p["_body"]
        self.store.require_bucket(p["Bucket"])
        _check_md5(p.get("ContentMD5"), body.md5, body.path)
        info = self._info(p, body.size, f'"{body.md5.hex()}"', body.checksums)
        info = await asyncio.to_thread(self.store.commit, body.path, info)
        return {"ETag": info.etag, **_checksum_fields(info.checksums), **reported(info.headers)}

    def _object(self, p: Mapping[str, Any]) -> tuple[ObjectInfo, Path]:
        self.store.require_bucket(p["Bucket"])
        info = self.store.get(p["Bucket"], p["Key"])
        path = self.store.path(p["Bucket"], p["Key"])
        if info is None or path is None:
            raise StoreError("NoSuchKey", "The specified key does not exist.", 404)
        return info, path

    def _described(self, info: ObjectInfo, p: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {
            "ETag": info.etag,
            "ContentLength": info.size,
            "ContentType": info.content_type,
            "LastModified": datetime.fromtimestamp(info.modified, UTC),
            "AcceptRanges": "bytes",
            **info.headers,
            **reported(info.headers),
        }
        if info.metadata:
            out["Metadata"] = info.metadata
        if info.parts:
            out["PartsCount"] = info.parts
        if str(p.get("ChecksumMode", "")).upper() == "ENABLED":
            out.update(_checksum_fields(info.checksums))
        return out

    def _conditions(self, info: ObjectInfo, p: Mapping[str, Any]) -> None:
        if p.get("IfMatch") and p["IfMatch"].strip() not in (info.etag, "*"):
            raise StoreError("PreconditionFailed", "At least one of the pre-conditions you specified did not hold", 412)
        if p.get("IfNoneMatch") and p["IfNoneMatch"].strip() in (info.etag, "*"):
            raise StoreError("NotModified", "Not Modified", 304)

    async def get_object(self, p: dict[str, Any]) -> dict[str, Any]:
        info, path = self._object(p)
        self._conditions(info, p)
        out = self._described(info, p)
        start, end = 0, info.size - 1
        if p.get("Range") and info.size > 0:
            rng = parse_range(p["Range"], info.size)
            if rng is not None:
                start, end = rng
                out["ContentRange"] = f"bytes {start}-{end}/{info.size}"
                out["StatusCode"] = 206
                out.pop("ChecksumCRC32", None)
                out.pop("ChecksumSHA256", None)
        out["ContentLength"] = end - start + 1
        out["_stream"] = (path, start, end)
        return out

    async def head_object(self, p: dict[str, Any]) -> dict[str, Any]:
        info, _ = self._object(p)
        self._conditions(info, p)
        return self._described(info, p)

    async def delete_object(self, p: dict[str, Any]) -> dict[str, Any]:
        self.store.require_bucket(p["Bucket"])
        await asyncio.to_thread(self.store.delete, p["Bucket"], p["Key"])
        return {}

    async def delete_objects(self, p: dict[str, Any]) -> dict[str, Any]:
        self.store.require_bucket(p["Bucket"])
        request = p.get("Delete") or {}
        objects = request.get("Objects") or []
        if not objects or len(objects) > 1000:
            raise StoreError("MalformedXML", "Delete takes 1 to 1000 <Object> entries")
        deleted = []
        for o in objects:
            await asyncio.to_thread(self.store.delete, p["Bucket"], o["Key"])
            deleted.append({"Key": o["Key"]})
        return {} if request.get("Quiet") else {"Deleted": deleted}

    async def copy_object(self, p: dict[str, Any]) -> dict[str, Any]:
        source = unquote(p["CopySource"].split("?versionId=")[0]).lstrip("/")
        src_bucket, _, src_key = source.partition("/")
        if not src_bucket or not src_key:
            raise StoreError("InvalidArgument", "x-amz-copy-source must be <bucket>/<key>")
        src, src_path = self._object({"Bucket": src_bucket, "Key": src_key})
        self.store.require_bucket(p["Bucket"])
        replace_meta = str(p.get("MetadataDirective", "COPY")).upper() == "REPLACE"
        if src_bucket == p["Bucket"] and src_key == p["Key"] and not replace_meta:
            raise StoreError(
                "InvalidRequest",
                "This copy request is illegal because it is trying to copy an object to "
                "itself without changing the object's metadata.",
            )
        tmp = self.store.temp_path()
        await asyncio.to_thread(copy_durably, src_path, tmp)
        if replace_meta:
            info = self._info(p, src.size, src.etag, src.checksums, src.parts)
        else:
            info = ObjectInfo(
                p["Bucket"],
                p["Key"],
                src.size,
                src.etag,
                0.0,
                src.content_type,
                {
                    **{k: v for k, v in src.headers.items() if k not in reported(src.headers)},
                    **self.settings.encryption(p),
                },
                src.metadata,
                src.checksums,
                src.parts,
            )
        info = await asyncio.to_thread(self.store.commit, tmp, info)
        last = datetime.fromtimestamp(info.modified, UTC)
        return {"CopyObjectResult": {"ETag": info.etag, "LastModified": last}, **reported(info.headers)}

    # ---- listing -------------------------------------------------------------------------------------------------
    def _walk(
        self, bucket: str, prefix: str, delimiter: str, after: str, limit: int
    ) -> tuple[list[ObjectInfo], list[str], str | None]:
        """Up to ``limit`` entries (objects and common prefixes) after ``after``; the last key returned when more
        follow (the next page starts after it)."""
        contents: list[ObjectInfo] = []
        prefixes: list[str] = []
        cursor = after
        if delimiter and after.startswith(prefix) and delimiter in after[len(prefix) :]:
            # a marker inside a common prefix (ListObjects' NextMarker is the prefix itself): skip what rolls up
            rest = after[len(prefix) :]
            cursor = prefix + rest[: rest.index(delimiter) + len(delimiter)] + "\U0010ffff"
        while len(contents) + len(prefixes) < limit:
            batch = self.store.objects(bucket, prefix, cursor, 1000)
            if not batch:
                return contents, prefixes, None
            for info in batch:
                if len(contents) + len(prefixes) >= limit:
                    return contents, prefixes, cursor
                rest = info.key[len(prefix) :]
                if delimiter and delimiter in rest:
                    common = prefix + rest[: rest.index(delimiter) + len(delimiter)]
                    prefixes.append(common)
                    cursor = common + "\U0010ffff"  # skip every key under it
                    break
                contents.append(info)
                cursor = info.key
            else:
                continue
        more = self.store.objects(bucket, prefix, cursor, 1)
        return contents, prefixes, cursor if more else None

    async def list_objects_v2(self, p: dict[str, Any]) -> dict[str, Any]:
        bucket = p["Bucket"]
        self.store.require_bucket(bucket)
        prefix, delimiter = p.get("Prefix", ""), p.get("Delimiter", "")
        limit = max(0, min(int(p.get("MaxKeys", 1000)), 1000))
        after = p.get("StartAfter", "")
        if p.get("ContinuationToken"):
            try:
                after = base64.urlsafe_b64decode(p["ContinuationToken"].encode()).decode("utf-8", "surrogatepass")
            except (binascii.Error, UnicodeDecodeError):
                raise StoreError("InvalidArgument", "The continuation token provided is incorrect") from None
        contents, prefixes, nxt = self._walk(bucket, prefix, delimiter, after, limit) if limit else ([], [], None)
        enc = _encoder(p)
        out: dict[str, Any] = {
            "Name": bucket,
            "Prefix": enc(prefix),
            "MaxKeys": limit,
            "KeyCount": len(contents) + len(prefixes),
            "IsTruncated": nxt is not None,
            "Contents": [_entry(i, enc) for i in contents] or None,
            "CommonPrefixes": [{"Prefix": enc(c)} for c in prefixes] or None,
        }
        if delimiter:
            out["Delimiter"] = enc(delimiter)
        if p.get("EncodingType"):
            out["EncodingType"] = p["EncodingType"]
        if p.get("ContinuationToken"):
            out["ContinuationToken"] = p["ContinuationToken"]
        if p.get("StartAfter"):
            out["StartAfter"] = enc(p["StartAfter"])
        if nxt is not None:
            out["NextContinuationToken"] = base64.urlsafe_b64encode(nxt.encode("utf-8", "surrogatepass")).decode()
        return out

    async def list_objects(self, p: dict[str, Any]) -> dict[str, Any]:
        bucket = p["Bucket"]
        self.store.require_bucket(bucket)
        prefix, delimiter = p.get("Prefix", ""), p.get("Delimiter", "")
        limit = max(0, min(int(p.get("MaxKeys", 1000)), 1000))
        contents, prefixes, nxt = self._walk(bucket, prefix, delimiter, p.get("Marker", ""), limit)
        enc = _encoder(p)
        out: dict[str, Any] = {
            "Name": bucket,
            "Prefix": enc(prefix),
            "Marker": enc(p.get("Marker", "")),
            "MaxKeys": limit,
            "IsTruncated": nxt is not None,
            "Contents": [_entry(i, enc) for i in contents] or None,
            "CommonPrefixes": [{"Prefix": enc(c)} for c in prefixes] or None,
        }
        if delimiter:
            out["Delimiter"] = enc(delimiter)
            if nxt is not None:
                out["NextMarker"] = enc(nxt.rstrip("\U0010ffff"))
        return out

    # ---- multipart -----------------------------------------------------------------------------------------------
    async def create_multipart_upload(self, p: dict[str, Any]) -> dict[str, Any]:
        self.store.require_bucket(p["Bucket"])
        info = self._info(p, 0, "", {})
        upload = self.store.create_upload(info)
        out = {"Bucket": p["Bucket"], "Key": p["Key"], "UploadId": upload, **reported(info.headers)}
        if p.get("ChecksumAlgorithm"):
            out["ChecksumAlgorithm"] = p["ChecksumAlgorithm"]
        return out

    async def upload_part(self, p: dict[str, Any]) -> dict[str, Any]:
        body = p["_body"]
        number = int(p["PartNumber"])
        if not 1 <= number <= 10000:
            body.path.unlink(missing_ok=True)
            raise StoreError("InvalidArgument", "Part number must be an integer between 1 and 10000, inclusive")
        try:
            upload = self.store.upload(p["Bucket"], p["Key"], p["UploadId"])
        except StoreError:
            body.path.unlink(missing_ok=True)
            raise
        _check_md5(p.get("ContentMD5"), body.md5, body.path)
        part = await asyncio.to_thread(
            self.store.put_part, upload, number, body.path, body.md5, body.size, body.checksums
        )
        return {"ETag": part.etag, **_checksum_fields(part.checksums), **reported(upload.info.headers)}

    async def upload_part_copy(self, p: dict[str, Any]) -> dict[str, Any]:
        """A part copied from an object (the whole, or ``CopySourceRange``): what the AWS CLI's ``s3 cp`` within S3
        sends for an object above its multipart threshold."""
        number = int(p["PartNumber"])
        if not 1 <= number <= 10000:
            raise StoreError("InvalidArgument", "Part number must be an integer between 1 and 10000, inclusive")
        upload = self.store.upload(p["Bucket"], p["Key"], p["UploadId"])
        src_bucket, _, src_key = unquote(p["CopySource"].split("?versionId=")[0]).lstrip("/").partition("/")
        src, src_path = self._object({"Bucket": src_bucket, "Key": src_key})
        start, end = copy_source_range(p.get("CopySourceRange"), src.size)
        if end - start + 1 > MAX_OBJECT:
            raise StoreError("EntityTooLarge", f"A part is at most {MAX_OBJECT} bytes")
        tmp = self.store.temp_path()
        md5 = await asyncio.to_thread(copy_range, src_path, tmp, start, end)
        part = await asyncio.to_thread(self.store.put_part, upload, number, tmp, md5, end - start + 1, {})
        last = datetime.fromtimestamp(part.modified, UTC)
        return {"CopyPartResult": {"ETag": part.etag, "LastModified": last}, **reported(upload.info.headers)}

    async def complete_multipart_upload(self, p: dict[str, Any]) -> dict[str, Any]:
        upload = self.store.upload(p["Bucket"], p["Key"], p["UploadId"])
        given = (p.get("MultipartUpload") or {}).get("Parts") or []
        if not given:
            raise StoreError("MalformedXML", "CompleteMultipartUpload names no parts")
        stored = {part.number: part for part in self.store.parts(upload.id)}
        chosen = []
        last = 0
        for g in given:
            n = int(g.get("PartNumber", 0))
            if n <= last:
                raise StoreError(
                    "InvalidPartOrder",
                    "The list of parts was not in ascending order. The parts list "
                    "must be specified in order by part number.",
                )
            last = n
            part = stored.get(n)
            if part is None or str(g.get("ETag", "")).strip('"') != part.etag.strip('"'):
                raise StoreError("InvalidPart", f"Part {n} was not uploaded, or its ETag does not match.")
            chosen.append(part)
        for part in chosen[:-1]:
            if part.size < MIN_PART:
                raise StoreError(
                    "EntityTooSmall",
                    f"Part {part.number} is {part.size} bytes; every part but the "
                    f"last must be at least {MIN_PART} bytes.",
                )
        tmp = self.store.temp_path()
        await asyncio.to_thread(assemble, [self.store.part_path(upload.id, c.number) for c in chosen], tmp)
        digest = hashlib.md5(b"".join(c.md5 for c in chosen), usedforsecurity=False).hexdigest()
        info = _upload_info(upload, sum(c.size for c in chosen), f'"{digest}-{len(chosen)}"', len(chosen))
        info = await asyncio.to_thread(self.store.finish_upload, upload, tmp, info)
        return {
            "Location": f"/{p['Bucket']}/{quote(p['Key'])}",
            "Bucket": p["Bucket"],
            "Key": p["Key"],
            "ETag": info.etag,
            **reported(info.headers),
        }

    async def abort_multipart_upload(self, p: dict[str, Any]) -> dict[str, Any]:
        upload = self.store.upload(p["Bucket"], p["Key"], p["UploadId"])
        await asyncio.to_thread(self.store.abort_upload, upload)
        return {}

    async def list_parts(self, p: dict[str, Any]) -> dict[str, Any]:
        upload = self.store.upload(p["Bucket"], p["Key"], p["UploadId"])
        marker = int(p.get("PartNumberMarker") or 0)
        limit = max(1, min(int(p.get("MaxParts", 1000)), 1000))
        parts = [x for x in self.store.parts(upload.id) if x.number > marker]
        page = parts[:limit]
        out: dict[str, Any] = {
            "Bucket": p["Bucket"],
            "Key": p["Key"],
            "UploadId": upload.id,
            "MaxParts": limit,
            "IsTruncated": len(parts) > limit,
            "Parts": [
                {
                    "PartNumber": x.number,
                    "ETag": x.etag,
                    "Size": x.size,
                    "LastModified": datetime.fromtimestamp(x.modified, UTC),
                }
                for x in page
            ]
            or None,
            "Initiator": _OWNER,
            "Owner": _OWNER,
            "StorageClass": "STANDARD",
        }
        if len(parts) > limit:
            out["NextPartNumberMarker"] = page[-1].number
        return out

    async def list_multipart_uploads(self, p: dict[str, Any]) -> dict[str, Any]:
        self.store.require_bucket(p["Bucket"])
        uploads = self.store.uploads(p["Bucket"], p.get("Prefix", ""))
        return {
            "Bucket": p["Bucket"],
            "IsTruncated": False,
            "MaxUploads": 1000,
            "Uploads": [
                {
                    "UploadId": u.id,
                    "Key": u.key,
                    "Initiated": datetime.fromtimestamp(u.created, UTC),
                    "StorageClass": "STANDARD",
                    "Owner": _OWNER,
                    "Initiator": _OWNER,
                }
                for u in uploads[:1000]
            ]
            or None,
        }


def _upload_info(upload: Upload, size: int, etag: str, parts: int) -> ObjectInfo:
    i = upload.info
    return ObjectInfo(upload.bucket, upload.key, size, etag, 0.0, i.content_type, i.headers, i.metadata, {}, parts)


def _entry(info: ObjectInfo, enc: Callable[[str], str]) -> dict[str, Any]:
    return {
        "Key": enc(info.key),
        "LastModified": datetime.fromtimestamp(info.modified, UTC),
        "ETag": info.etag,
        "Size": info.size,
        "StorageClass": "STANDARD",
    }


def _encoder(p: Mapping[str, Any]) -> Callable[[str], str]:
    if str(p.get("EncodingType", "")).lower() == "url":
        return lambda s: quote(s, safe="/")
    return lambda s: s


def _checksum_fields(checksums: Mapping[str, str]) -> dict[str, str]:
    return {f"Checksum{a.upper()}": v for a, v in checksums.items() if a in CHECKSUMS}  # ChecksumCRC64NVME, ...


def _check_md5(claimed: str | None, md5: bytes, path: Path) -> None:
    if claimed is None:
        return
    try:
        given = base64.b64decode(claimed, validate=True)
    except binascii.Error:
        path.unlink(missing_ok=True)
        raise StoreError("InvalidDigest", "The Content-MD5 you specified was invalid.") from None
    if given != md5:
        path.unlink(missing_ok=True)
        raise StoreError("BadDigest", "The Content-MD5 you specified did not match what we received.")
