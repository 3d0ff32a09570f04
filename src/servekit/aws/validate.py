"""Input members checked against the operation's input shape, as the real services check them.

Two kinds of failure, as AWS's front ends report them:

- a value of the wrong JSON type (a string where an integer belongs, a list where a structure belongs) fails
  *deserialization*: ``SerializationException``, at the first one found;
- a well-typed value that breaks a constraint (``required``, ``min``/``max`` length or value, ``enum``,
  ``pattern``) is a *validation* error; all of them are collected into one message in the real style:
  ``2 validation errors detected: Value 'bad name!' at 'endpointName' failed to satisfy constraint: Member must
  satisfy regular expression pattern: …; Value null at 'endpointConfigName' failed to satisfy constraint: Member
  must not be null``. Paths are lowerCamelCase member names, list items ``productionVariants.1.member.variantName``
  (1-based). Values of ``sensitive`` shapes are left out of the message.

Members the shape does not know are dropped, not refused: AWS JSON front ends skip unknown keys so that newer
clients keep working (botocore itself refuses them before sending, so boto3 never sends any).

The result is the input with wire types turned into Python ones: timestamps become aware ``datetime``s, blobs
``bytes``, integral floats for integer members ``int``.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from botocore.model import ListShape, MapShape, Shape, StructureShape

from servekit.aws.errors import ApiError
from servekit.aws.patterns import compile_pattern
from servekit.aws.timestamps import TimestampOutOfRange, parse_timestamp

_INT_RANGE = {"integer": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}
_JAVA_TYPE = {
    "string": "a String",
    "integer": "an Integer",
    "long": "a Long",
    "float": "a Float",
    "double": "a Double",
    "boolean": "a Boolean",
    "timestamp": "a Timestamp",
    "blob": "a ByteBuffer",
    "list": "a List",
    "map": "a Map",
    "structure": "a Structure",
}


def serialization_error(message: str) -> ApiError:
    return ApiError("SerializationException", message, 400)


def member_path(parent: str, member: str) -> str:
    name = member[:1].lower() + member[1:]
    return f"{parent}.{name}" if parent else name


def _json_kind(value: object) -> str:
    if value is None:
        return "NULL_VALUE"
    if isinstance(value, bool):
        return "BOOLEAN_VALUE"
    if isinstance(value, int | float):
        return "NUMBER_VALUE"
    if isinstance(value, str):
        return "STRING_VALUE"
    if isinstance(value, list):
        return "START_ARRAY"
    if isinstance(value, dict):
        return "START_OBJECT"
    return type(value).__name__


def _wrong_type(shape: Shape, value: object, path: str) -> ApiError:
    return serialization_error(
        f"{_json_kind(value)} can not be converted to {_JAVA_TYPE.get(shape.type_name, shape.type_name)} (at '{path}')"
    )


SHOWN_CHARS = 256  # of a value an error message quotes: a 400 never echoes a whole request back


def render_value(value: object) -> str:
    """A value as AWS messages print it (Java's ``toString`` for lists and maps), cut to :data:`SHOWN_CHARS`."""
    text = _render(value)
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}... ({len(text)} characters)"


def _render(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(_render(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}={_render(v)}" for k, v in value.items()) + "}"
    return str(value)


def _number_text(bound: object) -> str:
    return str(bound)


# Enums whose values the control plane decides instead (and refuses itself with its own message): instance types
# may be local ones from the --instance-types file, which no botocore model lists.
_OPEN_ENUMS = frozenset({"ProductionVariantInstanceType"})


def _local_location(pattern: str, value: str) -> bool:
    """servekit's one widening of the models: where SageMaker takes an S3 (or HTTPS) location — ModelDataUrl,
    capture and transform destinations — a local path or a ``file://`` URI is accepted too (the point of
    hosting locally), and storage resolves it."""
    return "s3)://" in pattern and value.startswith(("file://", "/"))


class _Checker:
    def __init__(self) -> None:
        self.errors: list[str] = []

    def fail(self, shape: Shape, value: object, path: str, constraint: str) -> None:
        if value is None:
            shown = "Value null"
        elif shape.metadata.get("sensitive"):
            shown = "Value"
        else:
            shown = f"Value '{render_value(value)}'"
        self.errors.append(f"{shown} at '{path}' failed to satisfy constraint: {constraint}")

    # -- constraints on a converted value, as strings (``Member must …``)
    def constraints(self, shape: Shape, value: Any) -> list[str]:
        meta = shape.metadata
        found: list[str] = []
        kind = shape.type_name
        if kind in ("string", "blob", "list", "map"):
            size = len(value)
            if "max" in meta and size > meta["max"]:
                found.append(f"Member must have length less than or equal to {meta['max']}")
            if "min" in meta and size < meta["min"]:
                found.append(f"Member must have length greater than or equal to {meta['min']}")
        elif kind in ("integer", "long", "float", "double"):
            if "max" in meta and value > meta["max"]:
                found.append(f"Member must have value less than or equal to {_number_text(meta['max'])}")
            if "min" in meta and value < meta["min"]:
                found.append(f"Member must have value greater than or equal to {_number_text(meta['min'])}")
        if kind == "string":
            enum = meta.get("enum")
            if enum and value not in enum and shape.name not in _OPEN_ENUMS:
                found.append(f"Member must satisfy enum value set: [{', '.join(enum)}]")
            pattern = meta.get("pattern")
            if pattern is not None:
                compiled = compile_pattern(pattern)
                if compiled is not None and compiled.fullmatch(value) is None and not _local_location(pattern, value):
                    found.append(f"Member must satisfy regular expression pattern: {pattern}")
        return found

    def value(self, shape: Shape, value: Any, path: str) -> Any:
        """``value`` converted to ``shape``'s Python type (raises on a wrong type), its constraint failures
        recorded."""
        converted = self.convert(shape, value, path)
        for constraint in self.constraints(shape, converted):
            self.fail(shape, converted, path, constraint)
        return converted

    def convert(self, shape: Shape, value: Any, path: str) -> Any:
        kind = shape.type_name
        if kind == "structure":
            assert isinstance(shape, StructureShape)
            if not isinstance(value, dict):
                raise _wrong_type(shape, value, path)
            return self.structure(shape, value, path)
        if kind == "list":
            assert isinstance(shape, ListShape)
            if not isinstance(value, list):
                raise _wrong_type(shape, value, path)
            return [self.value(shape.member, item, f"{path}.{i}.member") for i, item in enumerate(value, 1)]
        if kind == "map":
            assert isinstance(shape, MapShape)
            if not isinstance(value, dict):
                raise _wrong_type(shape, value, path)
            return self.map(shape, value, path)
        if kind == "string":
            if not isinstance(value, str):
                raise _wrong_type(shape, value, path)
            return value
        if kind == "boolean":
            if not isinstance(value, bool):
                raise _wrong_type(shape, value, path)
            return value
        if kind in _INT_RANGE:
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise _wrong_type(shape, value, path)
            if isinstance(value, float):
                if not value.is_integer():
                    raise serialization_error(f"{value} is not an integer (at '{path}')")
                value = int(value)
            lo, hi = _INT_RANGE[kind]
            if not lo <= value <= hi:
                raise serialization_error(f"{value} is out of range for {_JAVA_TYPE[kind]} (at '{path}')")
            return value
        if kind in ("float", "double"):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise _wrong_type(shape, value, path)
            return float(value)
        if kind == "timestamp":
            if isinstance(value, datetime):
                return value
            try:
                return parse_timestamp(value)
            except TimestampOutOfRange:  # a number, but past year 9999 (or before year 1): the value is invalid
                self.fail(shape, value, path, "Member must be a timestamp between the years 1 and 9999")
                return None
            except ValueError:
                raise _wrong_type(shape, value, path) from None
        if kind == "blob":
            if isinstance(value, bytes):
                return value
            if not isinstance(value, str):
                raise _wrong_type(shape, value, path)
            try:
                return base64.b64decode(value, validate=True)
            except (binascii.Error, ValueError):
                raise serialization_error(f"Value at '{path}' is not valid base64") from None
        return value  # document and other shapes: passed through as JSON

    def structure(self, shape: StructureShape, value: Mapping[str, Any], path: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, member in shape.members.items():
            item = value.get(name)
            if item is None:  # the path is built only for a member present or missing (most are absent)
                if name in shape.required_members:
                    self.fail(member, None, member_path(path, name), "Member must not be null")
                continue
            out[name] = self.value(member, item, member_path(path, name))
        if shape.metadata.get("union") and len(out) > 1:
            self.errors.append(
                f"Value at '{path or 'input'}' failed to satisfy constraint: Union must have exactly one member set"
            )
        return out

    def map(self, shape: MapShape, value: Mapping[str, Any], path: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        key_problems: list[str] = []
        value_problems: list[str] = []
        for key, item in value.items():
            sub = f"{path}.{key}"
            k = self.convert(shape.key, key, sub)
            key_problems += [c for c in self.constraints(shape.key, k) if c not in key_problems]
            if item is None:
                continue
            if shape.value.type_name in ("structure", "list", "map"):
                out[k] = self.value(shape.value, item, sub)
            else:
                v = self.convert(shape.value, item, sub)
                value_problems += [c for c in self.constraints(shape.value, v) if c not in value_problems]
                out[k] = v
        if key_problems:
            self.fail(shape, out, path, f"Map keys must satisfy constraint: [{', '.join(key_problems)}]")
        if value_problems:
            self.fail(shape, out, path, f"Map value must satisfy constraint: [{', '.join(value_problems)}]")
        return out


def validation_message(errors: list[str]) -> str:
    n = len(errors)
    return f"{n} validation error{'s' if n != 1 else ''} detected: " + "; ".join(errors)


def parse_input(
    shape: StructureShape | None, data: Mapping[str, Any], validation_code: str = "ValidationException"
) -> dict[str, Any]:
    """The operation input ``data`` (decoded JSON, plus values already taken from headers and the URI) checked
    and converted; raises :class:`ApiError` (``SerializationException`` or ``validation_code``)."""
    if shape is None:
        return {}
    checker = _Checker()
    converted = checker.structure(shape, data, "")
    if checker.errors:
        raise ApiError(validation_code, validation_message(checker.errors), 400)
    return converted
