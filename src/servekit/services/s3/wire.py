"""S3's ``rest-xml`` wire format from botocore's model: which operation a request is, its parameters, and the
response headers and XML body of a result.

An S3 operation is known by its method, whether the path names a key, the literal query of its ``requestUri``
(``?uploads``, ``?list-type=2``) and the query and header members it requires (``uploadId`` and ``partNumber``
make a PUT an UploadPart, ``x-amz-copy-source`` makes it a CopyObject): the most specific match wins, as on AWS.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl

from botocore.model import OperationModel, Shape, StructureShape

from servekit.aws import xml
from servekit.aws.models import service_model
from servekit.aws.timestamps import format_timestamp, parse_timestamp
from servekit.services.s3.store import StoreError

NAMESPACE = "http://s3.amazonaws.com/doc/2006-03-01/"
# S3's root element per output shape (botocore reads any root; other clients and humans expect these).
ROOTS = {
    "ListObjectsV2Output": "ListBucketResult",
    "ListObjectsOutput": "ListBucketResult",
    "ListBucketsOutput": "ListAllMyBucketsResult",
    "CreateMultipartUploadOutput": "InitiateMultipartUploadResult",
    "CompleteMultipartUploadOutput": "CompleteMultipartUploadResult",
    "ListPartsOutput": "ListPartsResult",
    "ListMultipartUploadsOutput": "ListMultipartUploadsResult",
    "DeleteObjectsOutput": "DeleteResult",
    "GetBucketLocationOutput": "LocationConstraint",
}


@dataclass(frozen=True)
class _Route:
    operation: OperationModel
    has_bucket: bool
    has_key: bool
    literal: tuple[tuple[str, str | None], ...]  # the requestUri's query: name and value (None: any)
    required_query: tuple[str, ...]
    required_headers: tuple[str, ...]

    @property
    def weight(self) -> int:
        return len(self.literal) * 4 + len(self.required_query) * 2 + len(self.required_headers)


def _route(op: OperationModel) -> _Route:
    uri = op.http["requestUri"]
    path, _, query = uri.partition("?")
    literal = tuple((k, v or None) for k, v in (p.partition("=")[::2] for p in query.split("&") if p) if k != "x-id")
    shape = op.input_shape
    req_q: list[str] = []
    req_h: list[str] = []
    if shape is not None:
        for name in shape.required_members:
            member = shape.members[name]
            where = member.serialization.get("location")
            if where == "querystring":
                req_q.append(member.serialization["name"])
            elif where == "header":
                req_h.append(member.serialization["name"].lower())
    return _Route(op, "{Bucket}" in path, "{Key+}" in path, literal, tuple(req_q), tuple(req_h))


@functools.cache
def routes() -> dict[str, list[_Route]]:
    """Every S3 operation of the installed model, by HTTP method."""
    model = service_model("s3")
    out: dict[str, list[_Route]] = {}
    for name in model.operation_names:
        op = model.operation_model(name)
        out.setdefault(op.http["method"], []).append(_route(op))
    return out


def match(
    method: str, has_bucket: bool, has_key: bool, query: Mapping[str, str], headers: Mapping[str, str]
) -> OperationModel | None:
    """The operation a request is (headers lower-cased), or None."""
    best: _Route | None = None
    for r in routes().get(method, []):
        if r.has_key != has_key or r.has_bucket != has_bucket:
            continue
        if any(k not in query or (v is not None and query[k] != v) for k, v in r.literal):
            continue
        if any(k not in query for k in r.required_query) or any(h not in headers for h in r.required_headers):
            continue
        if best is None or r.weight > best.weight:
            best = r
    return best.operation if best is not None else None


def query_dict(query: str) -> dict[str, str]:
    return dict(parse_qsl(query, keep_blank_values=True))


def _scalar(shape: Shape, text: str, where: str) -> Any:
    kind = shape.type_name
    try:
        if kind in ("integer", "long"):
            return int(text)
        if kind == "boolean":
            return text.lower() == "true"
        if kind == "timestamp":
            return parse_timestamp(text)
    except ValueError:
        raise StoreError("InvalidArgument", f"{where}: {text!r} is not a valid {kind}") from None
    return text


def parameters(
    op: OperationModel, bucket: str, key: str | None, query: Mapping[str, str], headers: Mapping[str, str]
) -> dict[str, Any]:
    """The operation's URI, query and header members (its payload is read separately)."""
    shape = op.input_shape
    out: dict[str, Any] = {}
    if shape is None:
        return out
    for name, member in shape.members.items():
        where = member.serialization.get("location")
        wire = member.serialization.get("name", name)
        if where == "uri":
            value = bucket if wire == "Bucket" else key
            if value is not None:
                out[name] = value
        elif where == "querystring" and wire in query:
            out[name] = _scalar(member, query[wire], wire)
        elif where == "header" and wire.lower() in headers:
            out[name] = _scalar(member, headers[wire.lower()], wire)
        elif where == "headers":
            prefix = wire.lower()
            found = {k[len(prefix) :]: v for k, v in headers.items() if k.startswith(prefix)}
            if found:
                out[name] = found
    return out


def payload_shape(op: OperationModel) -> tuple[str, Shape] | None:
    """The input's payload member (name, shape), if it has one."""
    shape = op.input_shape
    if shape is None:
        return None
    name = shape.serialization.get("payload")
    return (name, shape.members[name]) if name else None


def parse_payload(op: OperationModel, body: bytes) -> dict[str, Any]:
    """A structure payload (CompleteMultipartUpload's parts, DeleteObjects' keys) as the parameter it fills; a
    string payload (PutBucketPolicy's policy) as its text."""
    found = payload_shape(op)
    if found is None or not body.strip():
        return {}
    name, shape = found
    if shape.type_name == "string":
        return {name: body.decode("utf-8", "replace")}
    if not isinstance(shape, StructureShape):
        return {}
    try:
        return {name: xml.parse(body, shape)}
    except xml.XmlInputError as exc:
        raise StoreError(
            "MalformedXML",
            f"The XML you provided was not well-formed or did not validate against our published schema: {exc}",
        ) from None


def _header_text(shape: Shape, value: Any) -> str:
    if shape.type_name == "timestamp" and isinstance(value, datetime | int | float) and not isinstance(value, bool):
        return str(format_timestamp(value, shape.serialization.get("timestampFormat", "rfc822")))
    if shape.type_name == "boolean":
        return "true" if value else "false"
    return str(value)


def response(op: OperationModel, result: Mapping[str, Any]) -> tuple[int, dict[str, str], bytes | None]:
    """Status, headers and XML body of ``result`` (None when the payload is a blob the caller streams)."""
    status = int(op.http.get("responseCode", 200))
    shape = op.output_shape
    headers: dict[str, str] = {}
    if shape is None:
        return status, headers, b""
    body_members: dict[str, Any] = {}
    for name, member in shape.members.items():
        if name not in result or result[name] is None:
            continue
        where = member.serialization.get("location")
        wire = member.serialization.get("name", name)
        if where == "header":
            headers[wire] = _header_text(member, result[name])
        elif where == "headers":
            for k, v in result[name].items():
                headers[f"{wire}{k}"] = str(v)
        elif where == "statusCode":
            status = int(result[name])
        else:
            body_members[name] = result[name]
    payload = shape.serialization.get("payload")
    if payload:
        member = shape.members[payload]
        if member.type_name == "string" and isinstance(body_members.get(payload), str):  # GetBucketPolicy's text
            return status, {**headers, "Content-Type": "application/json"}, body_members[payload].encode()
        if member.type_name in ("blob", "string"):
            return status, headers, None
        value = body_members.get(payload)
        if value is None or not isinstance(member, StructureShape):
            return status, headers, b""
        root = member.serialization.get("name", payload)
        return status, {**headers, "Content-Type": "application/xml"}, xml.document(root, member, value, NAMESPACE)
    if not body_members:
        return status, headers, b""
    root = ROOTS.get(shape.name, shape.name.removesuffix("Output") + "Result")
    return status, {**headers, "Content-Type": "application/xml"}, xml.document(root, shape, body_members, NAMESPACE)


def error_body(code: str, message: str, request_id: str, resource: str | None = None) -> bytes:
    return xml.element("Error", {"Code": code, "Message": message, "Resource": resource, "RequestId": request_id})
