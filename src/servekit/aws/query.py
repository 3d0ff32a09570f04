"""AWS's ``query`` protocol (STS, IAM) on ``servekit up``'s port: a form body (``Action=GetRole&Version=…&RoleName=…``)
in, ``<ActionResponse><ActionResult>…</ActionResult><ResponseMetadata>…`` out; ``<ErrorResponse>`` for errors.

The form is read into the operation's input shape from botocore's model as botocore's query serializer writes it
(a structure's members ``Name.Member``, a list ``Name.member.N`` or flattened ``Name.N``, a map
``Name.entry.N.key``/``.value``), its scalars converted to the shape's types, then checked as every other protocol's
input is (:func:`servekit.aws.validate.parse_input`). Each service is one :class:`QueryService`: its handlers by
operation name, each given the parsed input and the calling key."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl

from botocore.model import ListShape, MapShape, OperationModel, Shape, StructureShape
from starlette.types import Receive, Scope, Send

from servekit.aws import xml
from servekit.aws.credentials import AccessKey
from servekit.aws.errors import ApiError
from servekit.aws.models import service_model
from servekit.aws.protocol import request_id
from servekit.aws.sigv4 import Verifier
from servekit.aws.validate import parse_input

MAX_BODY = 1 << 20
QueryHandler = Callable[[dict[str, Any], AccessKey | None], Mapping[str, Any]]
_INDEX = re.compile(r"[1-9][0-9]{0,5}")
# the JSON protocols' signature and authorization errors, as the query services name them
_QUERY_CODES = {
    "AccessDeniedException": "AccessDenied",
    "ExpiredTokenException": "ExpiredToken",
    "InvalidSignatureException": "SignatureDoesNotMatch",
    "UnrecognizedClientException": "InvalidClientTokenId",
    "MissingAuthenticationTokenException": "MissingAuthenticationToken",
    "IncompleteSignatureException": "IncompleteSignature",
}


def signed_for(service: str) -> Callable[[Scope], bool]:
    """Whether a request is signed for ``service`` (its SigV4 credential scope): how the port tells them apart."""
    needle = f"/{service}/aws4_request".encode()

    def match(scope: Scope) -> bool:
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                return needle in value
        return False

    return match


def _scalar(shape: Shape, text: str, path: str) -> Any:
    try:
        return xml.scalar(shape, text)  # the query protocol's values are written as its XML's are
    except ValueError:
        raise ApiError(
            "ValidationError", f"Invalid value {text!r} for {path}: expected a {shape.type_name}", 400
        ) from None


def _indexed(form: Mapping[str, str], prefix: str) -> list[str]:
    """The prefixes ``prefix.1``, ``prefix.2``, … present in ``form``, in order."""
    found = set()
    for key in form:
        if key.startswith(prefix + "."):
            index = key[len(prefix) + 1 :].split(".", 1)[0]
            if _INDEX.fullmatch(index):
                found.add(int(index))
    return [f"{prefix}.{i}" for i in sorted(found)]


def _present(form: Mapping[str, str], prefix: str) -> bool:
    return prefix in form or any(k.startswith(prefix + ".") for k in form)


def _read(shape: Shape, form: Mapping[str, str], prefix: str) -> Any:
    if isinstance(shape, StructureShape):
        out = {}
        for name, member in shape.members.items():
            where = f"{prefix}.{member.serialization.get('name', name)}" if prefix else name
            if _present(form, where):
                out[name] = _read(member, form, where)
        return out
    if isinstance(shape, ListShape):
        if form.get(prefix) == "":  # an empty list is sent as the bare name
            return []
        items = prefix if shape.serialization.get("flattened") else f"{prefix}.member"
        return [_read(shape.member, form, p) for p in _indexed(form, items)]
    if isinstance(shape, MapShape):
        entries = prefix if shape.serialization.get("flattened") else f"{prefix}.entry"
        out = {}
        for p in _indexed(form, entries):
            key = form.get(f"{p}.{shape.key.serialization.get('name', 'key')}", "")
            out[key] = _read(shape.value, form, f"{p}.{shape.value.serialization.get('name', 'value')}")
        return out
    return _scalar(shape, form.get(prefix, ""), prefix)


def parse_form(op: OperationModel, form: Mapping[str, str]) -> dict[str, Any]:
    """The operation's input from a query form (``Action`` and ``Version`` left out), checked against its shape."""
    shape = op.input_shape
    if shape is None:
        return {}
    assert isinstance(shape, StructureShape)
    data = _read(shape, {k: v for k, v in form.items() if k not in ("Action", "Version")}, "")
    return parse_input(shape, data, "ValidationError")


class QueryService:
    """One service of the query protocol on the port: ``handlers`` by operation name (the model's others answer
    ``InvalidAction`` saying what servekit serves); requests signed for ``signing_name``."""

    def __init__(
        self,
        service: str,
        handlers: Mapping[str, QueryHandler],
        verifier: Verifier | None,
        signing_name: str | None = None,
    ) -> None:
        self.model = service_model(service)
        self.name = service
        self.handlers = dict(handlers)
        self.verifier = verifier
        self.signing_name = signing_name or self.model.signing_name or service
        self.namespace = str(self.model.metadata.get("xmlNamespace", ""))

    def _response(self, action: str, shape: Shape | None, result: Mapping[str, Any], rid: str) -> bytes:
        inner = b""
        if isinstance(shape, StructureShape):
            inner = xml.document(f"{action}Result", shape, result).split(b"\n", 1)[1]
        return (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<{action}Response xmlns="{self.namespace}">'.encode()
            + inner
            + f"<ResponseMetadata><RequestId>{rid}</RequestId></ResponseMetadata></{action}Response>".encode()
        )

    def _error(self, exc: ApiError, rid: str) -> tuple[int, bytes]:
        code = _QUERY_CODES.get(exc.code, exc.code)
        status = 403 if code == "AccessDenied" else exc.status or 400
        kind = "Receiver" if status >= 500 else "Sender"
        err = xml.element("Error", {"Type": kind, "Code": code, "Message": exc.message}).split(b"\n", 1)[1]
        doc = (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<ErrorResponse xmlns="{self.namespace}">'.encode()
            + err
            + f"<RequestId>{rid}</RequestId></ErrorResponse>".encode()
        )
        return status, doc

    def handle(self, method: str, raw_path: str, headers: Mapping[str, str], body: bytes) -> tuple[int, bytes]:
        rid = request_id()
        try:
            if method != "POST":
                raise ApiError("InvalidAction", f"{self.name.upper()} takes POST requests with a form body", 400)
            key = (
                self.verifier.verify(method, raw_path, headers, body, self.signing_name, 403) if self.verifier else None
            )
            form = dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
            action = form.get("Action", "")
            version = self.model.api_version
            if action not in self.model.operation_names:
                raise ApiError("InvalidAction", f"Could not find operation {action!r} for version {version}", 400)
            handler = self.handlers.get(action)
            if handler is None:
                served = ", ".join(sorted(self.handlers))
                raise ApiError("InvalidAction", f"servekit's {self.name.upper()} answers {served}; not {action}", 400)
            op = self.model.operation_model(action)
            result = handler(parse_form(op, form), key)
            return 200, self._response(action, op.output_shape, result, rid)
        except ApiError as exc:
            return self._error(exc, rid)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        chunks: list[bytes] = []
        size, more = 0, True
        status, body = 413, b""
        while more:
            message = await receive()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_BODY:
                break
            chunks.append(chunk)
            more = message.get("more_body", False)
        else:
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            raw = scope.get("raw_path", b"").decode("latin-1") or scope["path"]
            if scope.get("query_string"):
                raw += "?" + scope["query_string"].decode("latin-1")
            status, body = self.handle(scope["method"], raw, headers, b"".join(chunks))
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"text/xml"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})
