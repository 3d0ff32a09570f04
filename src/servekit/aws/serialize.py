"""Results written per the operation's output shape.

A handler returns a plain dict (``datetime``s allowed, ``None`` meaning absent); this writes it as the protocol
does: JSON with epoch-second timestamps and base64 blobs for the JSON protocols; for rest-json, header-bound
members as headers, the payload member as the raw body and the remaining members as a JSON body.

``strict=True`` (tests, debugging) refuses keys the shape does not define and missing required members, so a
domain bug shows up as an error instead of a field botocore silently drops. Without it, unknown keys pass
through as JSON: an extension field (e.g. an endpoint's cost per hour) reaches clients that read the raw body.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from botocore.model import ListShape, MapShape, OperationModel, Shape, StructureShape

from servekit.aws.timestamps import format_timestamp, to_epoch


class OutputShapeError(ValueError):
    """A result that does not fit the output shape (only raised with ``strict``)."""


def _plain(value: Any) -> Any:
    """Unmodeled values: JSON as is, datetimes as epoch seconds, bytes as base64."""
    if isinstance(value, datetime):
        return to_epoch(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def json_value(shape: Shape, value: Any, path: str = "", strict: bool = False) -> Any:
    """``value`` as the JSON protocols write a member of ``shape``."""
    kind = shape.type_name
    if kind == "structure":
        assert isinstance(shape, StructureShape)
        return json_structure(shape, value, path, strict)
    if kind == "list":
        assert isinstance(shape, ListShape)
        return [json_value(shape.member, v, f"{path}[{i}]", strict) for i, v in enumerate(value)]
    if kind == "map":
        assert isinstance(shape, MapShape)
        return {str(k): json_value(shape.value, v, f"{path}.{k}", strict) for k, v in value.items() if v is not None}
    if kind == "timestamp":
        fmt = shape.serialization.get("timestampFormat", "unixTimestamp")
        return format_timestamp(value, fmt) if isinstance(value, datetime) else value
    if kind == "blob":
        return base64.b64encode(value).decode("ascii") if isinstance(value, bytes) else value
    if kind in ("float", "double") and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if strict:
        _check_scalar(kind, value, path)
    return value


_SCALAR = {
    "string": (str,),
    "boolean": (bool,),
    "integer": (int,),
    "long": (int,),
    "float": (float, int),
    "double": (float, int),
}


def _check_scalar(kind: str, value: Any, path: str) -> None:
    types = _SCALAR.get(kind)
    if types is None:
        return
    if (kind != "boolean" and isinstance(value, bool)) or not isinstance(value, types):
        raise OutputShapeError(f"{path or 'output'}: {type(value).__name__} where the shape says {kind}")


def json_structure(
    shape: StructureShape, data: Mapping[str, Any], path: str = "", strict: bool = False
) -> dict[str, Any]:
    if not isinstance(data, Mapping):
        raise OutputShapeError(f"{path or 'output'}: {type(data).__name__} where the shape says structure")
    out: dict[str, Any] = {}
    members = shape.members
    for key, value in data.items():
        if value is None:
            continue
        member = members.get(key)
        sub = f"{path}.{key}" if path else key
        if member is None:
            if strict:
                raise OutputShapeError(f"{sub}: not a member of {shape.name}")
            out[key] = _plain(value)
        else:
            out[key] = json_value(member, value, sub, strict)
    if strict:
        missing = [m for m in shape.required_members if out.get(m) is None]
        if missing:
            raise OutputShapeError(f"{path or shape.name}: required member(s) missing: {', '.join(missing)}")
    return out


def dumps(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":"), allow_nan=False).encode()


@dataclass(frozen=True)
class RestOutput:
    status: int
    headers: dict[str, str]
    body: bytes


def _header_text(shape: Shape, value: Any) -> str:
    kind = shape.type_name
    if kind == "boolean":
        return "true" if value else "false"
    if kind == "timestamp":
        fmt = shape.serialization.get("timestampFormat", "rfc822")
        return str(format_timestamp(value, fmt))
    if shape.serialization.get("jsonvalue"):
        return base64.b64encode(dumps(value)).decode("ascii")
    return str(value)


def rest_output(operation: OperationModel, data: Mapping[str, Any], strict: bool = False) -> RestOutput:
    """A rest-json result: status from the model's ``responseCode``, headers, and the body."""
    status = int(operation.http.get("responseCode", 200))
    shape = operation.output_shape
    headers: dict[str, str] = {}
    if shape is None:
        return RestOutput(status, headers, b"")
    payload_name = shape.serialization.get("payload")
    body_members: dict[str, Any] = {}
    body = b""
    for key, value in data.items():
        if value is None:
            continue
        member = shape.members.get(key)
        if member is None:
            if strict:
                raise OutputShapeError(f"{key}: not a member of {shape.name}")
            continue
        location = member.serialization.get("location")
        if location == "header":
            headers[member.serialization.get("name", key)] = _header_text(member, value)
        elif location == "headers":
            prefix = member.serialization.get("name", "")
            for k, v in value.items():
                headers[f"{prefix}{k}"] = str(v)
        elif location == "statusCode":
            status = int(value)
        elif key == payload_name:
            if member.serialization.get("eventstream"):
                # already framed by eventstream.py (a streaming gateway writes the frames itself)
                body = bytes(value)
                headers["Content-Type"] = "application/vnd.amazon.eventstream"
            elif member.type_name == "blob":
                body = value if isinstance(value, bytes) else str(value).encode()
            elif member.type_name == "string":
                body = str(value).encode()
            else:
                body = dumps(json_value(member, value, key, strict))
        else:
            body_members[key] = value
    if strict:
        missing = [m for m in shape.required_members if data.get(m) is None]
        if missing:
            raise OutputShapeError(f"{shape.name}: required member(s) missing: {', '.join(missing)}")
    if payload_name is None and body_members:
        body = dumps({k: json_value(shape.members[k], v, k, strict) for k, v in body_members.items()})
        headers.setdefault("Content-Type", "application/json")
    return RestOutput(status, headers, body)
