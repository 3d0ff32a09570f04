"""Requests in, responses out, for the two protocols the hosting APIs speak, driven by botocore's models.

- :class:`JsonProtocol` (AWS JSON 1.0/1.1: SageMaker, Application Auto Scaling, CloudWatch as botocore 1.43
  sends it): ``POST /`` with ``X-Amz-Target: <targetPrefix>.<Operation>``; errors ``{"__type", "message"}``
  (the modeled message member's spelling) plus ``x-amzn-query-error`` for query-compatible services.
- :class:`RestJsonProtocol` (sagemaker-runtime): operations found by method and the model's ``requestUri``,
  members bound to the URI, headers, query string and body by their ``location``; errors carry
  ``x-amzn-ErrorType: <Code>:…`` and a body ``{"Message", …extra}``.

Everything here is framework-free: plain method, raw (still percent-encoded) path, a headers mapping and body
bytes in; a :class:`Response` out.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from botocore.model import OperationModel, Shape

from servekit._utils.jsondepth import nests_deeper_than
from servekit.aws.errors import ApiError
from servekit.aws.models import ServiceSpec
from servekit.aws.serialize import OutputShapeError, dumps, json_structure, rest_output
from servekit.aws.sigv4 import lowered
from servekit.aws.timestamps import parse_timestamp
from servekit.aws.validate import member_path, parse_input, serialization_error, validation_message

_CORAL_NS = "http://internal.amazon.com/coral/com.amazon.sagemaker/"


@dataclass
class Response:
    """What to send back: status, headers (one value each) and body bytes."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


def split_path(raw_path: str) -> tuple[str, str]:
    """``/a%20b?x=1`` → (``/a%20b``, ``x=1``)."""
    if raw_path[:1] == "/" and raw_path[:2] != "//" and "#" not in raw_path:  # what an HTTP request line holds
        path, _, query = raw_path.partition("?")
        return path, query
    parts = urlsplit(raw_path)
    return parts.path or "/", parts.query


def request_id() -> str:
    return str(uuid.uuid4())


def unknown_operation(message: str = "") -> ApiError:
    return ApiError("UnknownOperationException", message, 400)


MAX_JSON_DEPTH = 128  # Search's recursive SubExpressions stay far below; a hostile body stops here


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def decode_json_body(body: bytes) -> dict[str, Any]:
    """A request body that must be a JSON object (empty means ``{}``); else ``SerializationException``."""
    if not body.strip():
        return {}
    if nests_deeper_than(body, MAX_JSON_DEPTH):  # json recurses per level: refuse before it does
        raise serialization_error(f"The request body nests JSON arrays/objects more than {MAX_JSON_DEPTH} levels deep")
    try:
        data = json.loads(body.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError:
        raise serialization_error("The request body is not UTF-8") from None
    except ValueError as e:
        raise serialization_error(f"The request body is not valid JSON: {e}") from None
    except RecursionError:  # a thread with less stack left than the depth check assumes
        raise serialization_error("The request body nests JSON too deeply") from None
    if isinstance(data, list):
        raise serialization_error("Start of list found where not expected")
    if not isinstance(data, dict):
        raise serialization_error("Expected a JSON object as the request body")
    return data


@dataclass(frozen=True)
class Parsed:
    """A decoded request: the operation and its checked, converted input members."""

    operation: OperationModel
    params: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.operation.name)


class _Protocol:
    def __init__(self, spec: ServiceSpec, strict_output: bool = False) -> None:
        self.spec = spec
        self.strict_output = strict_output

    def error_status(self, err: ApiError) -> int:
        if err.status is not None:
            return err.status
        info = self.spec.error_info(err.code)
        return info.status if info and info.status else 400

    def _operation(self, name: str) -> OperationModel:
        op = self.spec.operation(name)
        if op is None:
            raise unknown_operation()
        return op


class JsonProtocol(_Protocol):
    """AWS JSON 1.0 / 1.1 (``X-Amz-Target``)."""

    def operation_name(self, headers: Mapping[str, str]) -> str:
        """The operation the ``X-Amz-Target`` header names (``UnknownOperationException`` when it names none of
        this service's)."""
        target = lowered(headers).get("x-amz-target", "")
        prefix, _, name = target.rpartition(".")
        if prefix != self.spec.target_prefix or self.spec.operation(name) is None:
            raise unknown_operation()
        return name

    def parse(self, headers: Mapping[str, str], body: bytes) -> Parsed:
        op = self._operation(self.operation_name(headers))
        data = decode_json_body(body)
        return Parsed(op, parse_input(op.input_shape, data, self.spec.validation_code))

    def response(self, operation: OperationModel, data: Mapping[str, Any] | None, rid: str | None = None) -> Response:
        shape = operation.output_shape
        if shape is None:
            payload: dict[str, Any] = {}
        else:
            payload = json_structure(shape, data or {}, "", self.strict_output)
        return Response(200, self._headers(rid), dumps(payload))

    def _headers(self, rid: str | None) -> dict[str, str]:
        return {"Content-Type": self.spec.content_type, "x-amzn-RequestId": rid or request_id()}

    def error(self, err: ApiError, rid: str | None = None) -> Response:
        info = self.spec.error_info(err.code)
        headers = self._headers(rid)
        type_name = info.shape_name if info else err.code
        body: dict[str, Any] = {"__type": type_name}
        body[(info.message_member if info and info.message_member else "message")] = err.message
        body.update({k: v for k, v in err.extra.items() if v is not None})
        status = self.error_status(err)
        if self.spec.query_compatible:
            code = info.code if info else err.code
            headers["x-amzn-query-error"] = f"{code};{'Sender' if status < 500 else 'Receiver'}"
        return Response(status, headers, dumps(body))


_MATCHES_KEPT = 4096


@dataclass(frozen=True, slots=True)
class _Plan:
    """An operation's input members as (name, location, wire name, shape), its payload member, the located ones."""

    members: list[tuple[str, str | None, str, Shape]]
    payload: str | None
    located: frozenset[str]


@dataclass(frozen=True)
class _Route:
    method: str
    regex: re.Pattern[str]
    labels: dict[str, str]  # regex group → member name
    operation: OperationModel


def _route(op: OperationModel) -> _Route:
    uri = str(op.http["requestUri"]).split("?", 1)[0]
    pattern = ""
    labels: dict[str, str] = {}
    pos = 0
    for m in re.finditer(r"\{([^}]+)\}", uri):
        pattern += re.escape(uri[pos : m.start()])
        name = m.group(1)
        group = f"g{len(labels)}"
        greedy = name.endswith("+")
        labels[group] = name.rstrip("+")
        pattern += f"(?P<{group}>.+)" if greedy else f"(?P<{group}>[^/]+)"
        pos = m.end()
    pattern += re.escape(uri[pos:])
    return _Route(str(op.http.get("method", "POST")).upper(), re.compile(pattern), labels, op)


class RestJsonProtocol(_Protocol):
    """REST-JSON (sagemaker-runtime): routes from the model's ``requestUri``; members by ``location``."""

    def __init__(self, spec: ServiceSpec, strict_output: bool = False) -> None:
        super().__init__(spec, strict_output)
        routes = [_route(spec.model.operation_model(name)) for name in spec.model.operation_names]
        # literal-longest first, so /a/{x}/b wins over /a/{x+}
        self._routes = sorted(routes, key=lambda r: -len(r.regex.pattern))
        # (method, path) -> its match: a request is matched three times (route, operation name, parse) and an
        # endpoint's invocations all have one path; bounded, cleared when full
        self._matched: dict[tuple[str, str], tuple[OperationModel, dict[str, str]] | None] = {}
        self._plans: dict[str, _Plan] = {}

    def match(self, method: str, raw_path: str) -> tuple[OperationModel, dict[str, str]] | None:
        """The operation whose method and URI template fit, with its (decoded) URI labels (not to be changed)."""
        path, _ = split_path(raw_path)
        key = (method, path)
        try:
            return self._matched[key]
        except KeyError:
            pass
        found = None
        for route in self._routes:
            m = route.regex.fullmatch(path)
            if m and route.method == method.upper():
                # the labels are matched on the percent-encoded path, then decoded
                found = route.operation, {route.labels[g]: unquote(v) for g, v in m.groupdict().items()}
                break
        if len(self._matched) >= _MATCHES_KEPT:
            self._matched.clear()
        self._matched[key] = found
        return found

    def _plan(self, op: OperationModel, shape: Shape) -> _Plan:
        """Where each input member comes from, worked out once per operation from its shape."""
        plan = self._plans.get(op.name)
        if plan is None:
            members = [
                (name, member.serialization.get("location"), member.serialization.get("name", name), member)
                for name, member in shape.members.items()
            ]
            # header names are looked up lower-cased
            members = [(n, loc, w.lower() if loc in ("header", "headers") else w, m) for n, loc, w, m in members]
            located = frozenset(n for n, m in shape.members.items() if m.serialization.get("location"))
            plan = self._plans[op.name] = _Plan(members, shape.serialization.get("payload"), located)
        return plan

    def operation_name(self, method: str, raw_path: str) -> str:
        found = self.match(method, raw_path)
        if found is None:
            raise unknown_operation()
        return str(found[0].name)

    def parse(self, method: str, raw_path: str, headers: Mapping[str, str], body: bytes) -> Parsed:
        found = self.match(method, raw_path)
        if found is None:
            raise unknown_operation()
        op, labels = found
        shape = op.input_shape
        if shape is None:
            return Parsed(op, {})
        low = lowered(headers)
        _, query = split_path(raw_path)
        qs = parse_qsl(query, keep_blank_values=True) if query else []
        data: dict[str, Any] = {}
        problems: list[str] = []
        plan = self._plan(op, shape)
        payload = plan.payload
        for name, loc, wire, member in plan.members:
            if loc == "uri":
                if wire in labels:
                    data[name] = labels[wire]
            elif loc == "header":
                if wire in low:
                    data[name] = _header_value(member, low[wire], name, problems)
            elif loc == "headers":
                prefix = wire
                data[name] = {k[len(prefix) :]: v for k, v in low.items() if k.startswith(prefix)} or None
            elif loc == "querystring":
                values = [v for k, v in qs if k == wire]
                if values:
                    text = values if member.type_name == "list" else values[-1]
                    data[name] = (
                        text
                        if member.type_name in ("list", "string", "map")
                        else _header_value(member, values[-1], name, problems)
                    )
        if problems:
            raise ApiError(self.spec.validation_code, validation_message(problems), 400)
        if payload is not None:
            member = shape.members[payload]
            if member.type_name in ("blob", "string"):
                # an optional payload that was not sent is absent, not empty (newer botocore models give
                # InvokeEndpointAsync an optional Body beside InputLocation)
                if body or payload in shape.required_members:
                    data[payload] = body if member.type_name == "blob" else body.decode("utf-8", "replace")
            elif body.strip():
                data[payload] = decode_json_body(body)
        else:
            for key, value in decode_json_body(body).items():
                if key in shape.members and key not in plan.located:
                    data[key] = value
        return Parsed(op, parse_input(shape, data, self.spec.validation_code))

    def response(self, operation: OperationModel, data: Mapping[str, Any] | None, rid: str | None = None) -> Response:
        out = rest_output(operation, data or {}, self.strict_output)
        headers = {"x-amzn-RequestId": rid or request_id(), **out.headers}
        return Response(out.status, headers, out.body)

    def error(self, err: ApiError, rid: str | None = None) -> Response:
        body: dict[str, Any] = {}
        extra = {k: v for k, v in err.extra.items() if v is not None}
        if "ErrorCode" in extra:
            body["ErrorCode"] = extra.pop("ErrorCode")
        body["Message"] = err.message
        body.update(extra)
        headers = {
            "Content-Type": "application/json",
            "x-amzn-RequestId": rid or request_id(),
            "x-amzn-ErrorType": f"{err.code}:{_CORAL_NS}",
        }
        return Response(self.error_status(err), headers, dumps(body))


def _header_value(member: Shape, text: str, name: str, problems: list[str]) -> Any:
    """A header (or query) string as the member's type; a value that does not parse is a validation problem."""
    kind = member.type_name
    try:
        if kind in ("integer", "long"):
            return int(text.strip())
        if kind in ("float", "double"):
            return float(text.strip())
        if kind == "boolean":
            lowered = text.strip().lower()
            if lowered not in ("true", "false"):
                raise ValueError(text)
            return lowered == "true"
        if kind == "timestamp":
            return parse_timestamp(text)
        if member.serialization.get("jsonvalue"):
            return json.loads(base64.b64decode(text))
    except (ValueError, TypeError):
        problems.append(
            f"Value '{text}' at '{member_path('', name)}' failed to satisfy constraint: Member must be {_A[kind]}"
        )
        return None
    return text


_A = {
    "integer": "an integer",
    "long": "an integer",
    "float": "a number",
    "double": "a number",
    "boolean": "true or false",
    "timestamp": "a timestamp",
    "string": "a JSON value",
}


def protocol_for(spec: ServiceSpec, strict_output: bool = False) -> JsonProtocol | RestJsonProtocol:
    """The protocol object for a service, chosen by the protocol installed botocore speaks to it."""
    if spec.protocol == "json":
        return JsonProtocol(spec, strict_output)
    if spec.protocol == "rest-json":
        return RestJsonProtocol(spec, strict_output)
    raise ValueError(f"{spec.name}: protocol {spec.protocol!r} is not supported")


__all__ = [
    "JsonProtocol",
    "OutputShapeError",
    "Parsed",
    "Response",
    "RestJsonProtocol",
    "decode_json_body",
    "protocol_for",
    "unknown_operation",
]
