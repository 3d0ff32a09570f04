"""XML bodies written and read per a botocore shape: the ``rest-xml`` protocol (S3) and the ``query`` protocol's
responses (STS).

botocore's parsers find members by ``locationName`` (or the member name), lists as repeated elements (flattened)
or wrapped in ``<member>`` (or the member's ``locationName``), timestamps as ISO 8601, blobs as base64, booleans
as ``true``/``false``. Writing from the shape keeps servekit's answers in the form the installed botocore reads;
reading from the shape turns a request payload (S3's ``CompleteMultipartUpload``, ``Delete``) into the same
plain dict the JSON protocols produce.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from datetime import datetime
from typing import Any
from xml.etree import ElementTree as ET

from botocore.model import ListShape, MapShape, Shape, StructureShape

from servekit.aws.timestamps import format_timestamp, parse_timestamp

MAX_DEPTH = 64  # no modeled payload nests deeper; a hostile document stops here


class XmlInputError(ValueError):
    """A payload that is not well-formed XML or does not fit its shape (the caller answers MalformedXML)."""


def _text(shape: Shape, value: Any) -> str:
    kind = shape.type_name
    if kind == "timestamp":
        fmt = shape.serialization.get("timestampFormat", "iso8601")
        if isinstance(value, datetime | int | float) and not isinstance(value, bool):
            return str(format_timestamp(value, fmt))
        return str(value)
    if kind == "boolean":
        return "true" if value else "false"
    if kind == "blob":
        return base64.b64encode(value).decode("ascii") if isinstance(value, bytes) else str(value)
    return str(value)


def _append(parent: ET.Element, name: str, shape: Shape, value: Any) -> None:
    """``value`` of ``shape`` as child element(s) ``name`` of ``parent``."""
    if value is None:
        return
    kind = shape.type_name
    if kind == "list":
        assert isinstance(shape, ListShape)
        member = shape.member
        if shape.serialization.get("flattened"):
            item = member.serialization.get("name", name)
            for v in value:
                _append(parent, item, member, v)
            return
        wrapper = ET.SubElement(parent, name)
        item = member.serialization.get("name", "member")
        for v in value:
            _append(wrapper, item, member, v)
        return
    if kind == "map":
        assert isinstance(shape, MapShape)
        wrapper = ET.SubElement(parent, name)
        for k, v in value.items():
            entry = ET.SubElement(wrapper, "entry")
            _append(entry, shape.key.serialization.get("name", "key"), shape.key, k)
            _append(entry, shape.value.serialization.get("name", "value"), shape.value, v)
        return
    element = ET.SubElement(parent, name)
    if kind == "structure":
        assert isinstance(shape, StructureShape)
        fill(element, shape, value)
    else:
        element.text = _text(shape, value)


def fill(element: ET.Element, shape: StructureShape, value: Mapping[str, Any], body_only: bool = False) -> None:
    """The members of ``value`` as children of ``element`` (``body_only``: skip header/URI/status members)."""
    for name, member in shape.members.items():
        if body_only and member.serialization.get("location"):
            continue
        if name not in value:
            continue
        _append(element, member.serialization.get("name", name), member, value[name])


def document(root: str, shape: StructureShape, value: Mapping[str, Any], namespace: str | None = None) -> bytes:
    """An XML document whose root element ``root`` holds the body members of ``value``."""
    element = ET.Element(root, {"xmlns": namespace} if namespace else {})
    fill(element, shape, value, body_only=True)
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + bytes(
        ET.tostring(element, encoding="utf-8", xml_declaration=False)
    )


def element(name: str, children: Mapping[str, str | None], namespace: str | None = None) -> bytes:
    """A flat document ``<name><k>v</k>…</name>`` (S3's and the query protocol's error bodies)."""
    root = ET.Element(name, {"xmlns": namespace} if namespace else {})
    for k, v in children.items():
        if v is not None:
            ET.SubElement(root, k).text = v
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + bytes(
        ET.tostring(root, encoding="utf-8", xml_declaration=False)
    )


# ---------------------------------------------------------------------------------------------------- reading
def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


def parse(payload: bytes, shape: StructureShape) -> dict[str, Any]:
    """A request payload as the plain dict of ``shape``'s members; raises :class:`XmlInputError`."""
    if b"<!DOCTYPE" in payload or b"<!ENTITY" in payload:
        raise XmlInputError("document type declarations are not allowed")
    try:
        root = ET.fromstring(payload)
    except ET.ParseError as exc:
        raise XmlInputError(f"the XML is not well-formed: {exc}") from None
    return _structure(root, shape, 0)


def _structure(node: ET.Element, shape: StructureShape, depth: int) -> dict[str, Any]:
    if depth > MAX_DEPTH:
        raise XmlInputError(f"the XML nests deeper than {MAX_DEPTH} levels")
    by_name: dict[str, list[ET.Element]] = {}
    for child in node:
        by_name.setdefault(_local(child.tag), []).append(child)
    out: dict[str, Any] = {}
    for name, member in shape.members.items():
        tag = member.serialization.get("name", name)
        found = by_name.get(tag)
        if not found:
            continue
        if member.type_name == "list" and isinstance(member, ListShape) and member.serialization.get("flattened"):
            out[name] = [_value(n, member.member, depth + 1) for n in found]
        else:
            out[name] = _value(found[0], member, depth + 1)
    return out


def _value(node: ET.Element, shape: Shape, depth: int) -> Any:
    kind = shape.type_name
    if kind == "structure":
        assert isinstance(shape, StructureShape)
        return _structure(node, shape, depth)
    if kind == "list":
        assert isinstance(shape, ListShape)
        item = shape.member.serialization.get("name", "member")
        return [_value(n, shape.member, depth + 1) for n in node if _local(n.tag) == item]
    try:
        return scalar(shape, (node.text or "").strip())
    except ValueError as exc:
        raise XmlInputError(f"<{_local(node.tag)}>: {exc}") from None


def scalar(shape: Shape, text: str) -> Any:
    """A scalar member's text (an XML element's, a query form's value) as its shape's type; ValueError saying why
    it is not one."""
    kind = shape.type_name
    if kind in ("integer", "long"):
        return int(text)
    if kind in ("float", "double"):
        return float(text)
    if kind == "boolean":
        if text not in ("true", "false"):
            raise ValueError(f"{text!r} is not true or false")
        return text == "true"
    if kind == "timestamp":
        return parse_timestamp(text)
    if kind == "blob":
        return base64.b64decode(text, validate=True)
    return text
