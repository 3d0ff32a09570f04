"""One entry point for every AWS API that ``servekit up`` serves on its port.

:class:`Api` picks the service a request is for (``X-Amz-Target`` prefix for the JSON services, the model's
URI templates for sagemaker-runtime), verifies its SigV4 signature, checks the key's scope (``invoke`` keys reach
the runtime only), decodes and validates the input, calls the handler and writes its result or error in the
service's protocol. It knows no web framework: an ASGI app passes method, raw path, headers and body, and sends
back the :class:`~servekit.aws.protocol.Response`::

    api = Api(credentials=Credentials.load_or_create(home))

    async def asgi_handler(method, raw_path, headers, body):
        response = await api.handle_async(method, raw_path, headers, body, dispatch)
        if response is None:
            ...  # not an AWS API request: /ping, /metrics, a 404
        return response

``dispatch(call)`` gets a :class:`Call` (service, operation, validated params, the caller's key) and returns the
output dict (or raises :class:`~servekit.aws.errors.ApiError`).
"""

from __future__ import annotations

import contextvars
import logging
import time
import zlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from servekit.aws.credentials import AccessKey, Scope, authorize
from servekit.aws.errors import ApiError, internal_failure
from servekit.aws.models import service
from servekit.aws.protocol import (
    JsonProtocol,
    Parsed,
    Response,
    RestJsonProtocol,
    protocol_for,
    request_id,
    split_path,
    unknown_operation,
)
from servekit.aws.serialize import OutputShapeError
from servekit.aws.sigv4 import KeyLookup, Verifier, lowered

log = logging.getLogger(__name__)

SERVICES = ("sagemaker", "sagemaker-runtime", "application-autoscaling", "cloudwatch", "logs", "kms")
# The scope a key needs per service; anything not listed needs "admin".
SCOPE_NEEDED: dict[str, Scope] = {"sagemaker-runtime": "invoke"}


@dataclass(frozen=True)
class Call:
    """A decoded, authenticated, validated API call."""

    service: str
    operation: str
    params: dict[str, Any]
    key: AccessKey | None
    request_id: str = field(default_factory=request_id)


# The access key id of the caller of the request being handled (None outside a request, or unsigned): the plane
# sets it per dispatched call so handlers keep their one-argument shape; histories (registry approvals) read it.
CALLER: contextvars.ContextVar[str | None] = contextvars.ContextVar("servekit_api_caller", default=None)


def current_caller() -> str | None:
    return CALLER.get()


Protocol = JsonProtocol | RestJsonProtocol
Dispatch = Callable[[Call], Mapping[str, Any] | None]
# One operation of a service: its validated parameters -> its result (before serialization).
Handler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
AsyncDispatch = Callable[[Call], Awaitable[Mapping[str, Any] | None]]


class Api:
    """The AWS APIs on one port.

    ``credentials=None`` turns signature checks off (every caller is admin): only for tests of other layers.
    ``strict_output`` makes a result with keys the output shape lacks (or without its required members) a 500,
    so tests catch domain bugs.
    """

    def __init__(
        self,
        credentials: KeyLookup | None,
        services: tuple[str, ...] = SERVICES,
        clock: Callable[[], float] = time.time,
        strict_output: bool = False,
        region: str | None = None,
    ) -> None:
        self.protocols: dict[str, Protocol] = {name: protocol_for(service(name), strict_output) for name in services}
        self._by_target = {p.spec.target_prefix: p for p in self.protocols.values() if isinstance(p, JsonProtocol)}
        self._rest = [p for p in self.protocols.values() if isinstance(p, RestJsonProtocol)]
        self._fallback = next(iter(self._by_target.values()), None)
        # a region: requests signed for another are refused, as a regional AWS endpoint refuses them
        self.verifier = Verifier(credentials, clock, region=region) if credentials is not None else None

    # -- routing
    def route(self, method: str, raw_path: str, headers: Mapping[str, str]) -> Protocol | None:
        """The service a request is for, or ``None`` when it is not an AWS API request."""
        path, _ = split_path(raw_path)
        target = lowered(headers).get("x-amz-target")
        if method.upper() == "POST" and path == "/":
            if target is not None:
                return self._by_target.get(target.rpartition(".")[0], self._fallback)
            if lowered(headers).get("content-type", "").startswith("application/x-amz-json"):
                return self._fallback  # a JSON-protocol call without a target: UnknownOperationException
        for proto in self._rest:
            if proto.match(method, raw_path) is not None:
                return proto
        return None

    # -- the steps, for callers that want them separately
    def decode(
        self,
        proto: Protocol,
        method: str,
        raw_path: str,
        headers: Mapping[str, str],
        body: bytes,
        rid: str | None = None,
    ) -> Call:
        """Authenticate, authorize and parse; raises :class:`ApiError`. ``rid``: the request id (a new one when
        not given)."""
        spec = proto.spec
        if isinstance(proto, JsonProtocol):
            target = lowered(headers).get("x-amz-target", "")
            if target.rpartition(".")[0] != spec.target_prefix:
                raise unknown_operation()
        key = None
        if self.verifier is not None:
            status = 400 if isinstance(proto, JsonProtocol) else 403
            key = self.verifier.verify(method, raw_path, headers, body, spec.signing_name, status)
        if isinstance(proto, JsonProtocol):
            operation = proto.operation_name(headers)
        else:
            operation = proto.operation_name(method, raw_path)
        if key is not None:
            authorize(key, SCOPE_NEEDED.get(spec.name, "admin"), f"{spec.signing_name}:{operation}")
        body = _decoded(headers, body)  # after the signature, which covers the bytes as sent
        parsed: Parsed
        if isinstance(proto, JsonProtocol):
            parsed = proto.parse(headers, body)
        else:
            parsed = proto.parse(method, raw_path, headers, body)
        if rid is None:
            return Call(spec.name, parsed.name, parsed.params, key)
        return Call(spec.name, parsed.name, parsed.params, key, rid)

    def encode(self, call: Call, result: Mapping[str, Any] | None) -> Response:
        proto = self.protocols[call.service]
        op = proto.spec.operation(call.operation)
        assert op is not None
        return proto.response(op, result, call.request_id)

    def error(self, proto: Protocol, err: BaseException, rid: str | None = None) -> Response:
        """An exception as the service's error response (anything but :class:`ApiError` is a logged 500)."""
        if not isinstance(err, ApiError):
            if isinstance(err, OutputShapeError):
                log.error("result does not fit the output shape: %s", err)
            else:
                log.error("unexpected error in an API handler", exc_info=err)
            err = internal_failure()
        return proto.error(err, rid)

    # -- all in one
    def handle(
        self, method: str, raw_path: str, headers: Mapping[str, str], body: bytes, dispatch: Dispatch
    ) -> Response | None:
        proto = self.route(method, raw_path, headers)
        if proto is None:
            return None
        rid = request_id()
        try:
            call = self.decode(proto, method, raw_path, headers, body, rid)
            return self.encode(call, dispatch(call))
        except Exception as e:
            return self.error(proto, e, rid)

    async def handle_async(
        self, method: str, raw_path: str, headers: Mapping[str, str], body: bytes, dispatch: AsyncDispatch
    ) -> Response | None:
        proto = self.route(method, raw_path, headers)
        if proto is None:
            return None
        rid = request_id()
        try:
            call = self.decode(proto, method, raw_path, headers, body, rid)
            return self.encode(call, await dispatch(call))
        except Exception as e:
            return self.error(proto, e, rid)


_MAX_INFLATED = 16 * 2**20  # no API body servekit takes is larger uncompressed (PutMetricData's limit is 1 MB)


def _decoded(headers: Mapping[str, str], body: bytes) -> bytes:
    """The body as the operation reads it: botocore gzips some request bodies over 10 KiB (PutMetricData's
    ``requestcompression`` trait) and says so in Content-Encoding. Inflated with a cap, so a small bomb stays small."""
    encoding = lowered(headers).get("content-encoding", "").strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding != "gzip":
        raise ApiError("SerializationException", f"Content-Encoding {encoding} is not supported; use gzip.", 400)
    inflater = zlib.decompressobj(wbits=31)
    try:
        out = inflater.decompress(body, _MAX_INFLATED + 1)
    except zlib.error as exc:
        raise ApiError("SerializationException", f"The gzip request body is corrupt: {exc}.", 400) from None
    if len(out) > _MAX_INFLATED or inflater.unconsumed_tail:
        raise ApiError("SerializationException", f"The request body inflates past {_MAX_INFLATED} bytes.", 413)
    return out
