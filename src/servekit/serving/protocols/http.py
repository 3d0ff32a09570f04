"""Helpers every HTTP adapter shares: bounded body reads, JSON with positions, responses, timing headers."""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from servekit.errors import ErrorCode, ServekitError, invalid
from servekit.serving.codecs.json import dumps
from servekit.serving.core.ports import RequestObserver
from servekit.serving.schema import InferenceResponse

log = logging.getLogger(__name__)

JSON_TYPE = "application/json"
_DUMP_OPTS = orjson.OPT_SERIALIZE_NUMPY


class Backlog:
    """Requests the server has received whole and not yet answered, across its connections, as its HTTP transport
    counts them (``serve``'s connection guard, launch/connections.py). Read by the adapters to tell the service
    when a request is alone: at that moment nothing else is parsed and waiting, so with batching on nothing
    could join its batch."""

    __slots__ = ("pending",)

    def __init__(self) -> None:
        self.pending = 0


def scope_header(scope: Mapping[str, Any], name: bytes) -> str | None:
    """One request header read straight from the ASGI scope (``name`` lowercase, as servers deliver header names),
    for the hot path's one or two lookups: Starlette's ``request.headers`` builds a mapping of them all first."""
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, refusing (413) anything over ``limit`` bytes before or while it streams in."""
    declared = scope_header(request.scope, b"content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise invalid(f"Content-Length {declared!r} is not a number") from None
        if size > limit:
            raise ServekitError(
                ErrorCode.PAYLOAD_TOO_LARGE,
                f"request body of {size} bytes exceeds the limit of {limit} bytes (--max_request_bytes)",
            )
        # The declared size is within the limit and the HTTP server holds the body to it; read the ASGI
        # messages directly (Starlette's body() goes through an async generator per request).
        receive = request.receive
        message = await receive()
        body: bytes = message.get("body", b"")
        while message.get("more_body", False):
            message = await receive()
            body += message.get("body", b"")
        if message["type"] == "http.disconnect" or len(body) != size:
            # the client went away (or a read timeout fired) mid-body: never hand a model a truncated body
            raise ServekitError(
                ErrorCode.CANCELLED, f"the request body ended after {len(body)} of its {size} declared bytes"
            )
        return body
    chunks: list[bytes] = []
    total = 0
    try:
        async for chunk in request.stream():
            total += len(chunk)
            if total > limit:
                raise ServekitError(
                    ErrorCode.PAYLOAD_TOO_LARGE,
                    f"request body exceeds the limit of {limit} bytes (--max_request_bytes)",
                )
            chunks.append(chunk)
    except ClientDisconnect:
        # A chunked body that stops before its last chunk: the client went away, or sent a chunk the HTTP server
        # cannot parse (`zz`, `-1`, an overlong size), which the server has already answered with its own 400
        # and logged in one line. Either way a client's doing, not ours: no traceback, no INTERNAL in metrics.
        raise ServekitError(
            ErrorCode.CANCELLED, f"the chunked request body ended after {total} bytes, before its last chunk"
        ) from None
    return b"".join(chunks)


def json_response(value: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(dumps(value), status_code=status, media_type=JSON_TYPE, headers=dict(headers or {}))


# Statuses that mean "try again later": each carries Retry-After, so clients and proxies back off instead of
# retrying at once (a model still loading, a full queue, a deadline passed under load).
RETRY_STATUSES = frozenset({429, 503, 504})
RETRY_AFTER_SECONDS = "1"
# Set in a request's ASGI scope: by the app on a request it refused as overload (its connection is then not read
# until Retry-After has passed), and by the connection on a request that arrived while so held (its client did not
# wait; the app refuses it again at once). See launch/connections.py.
SHED_KEY = "servekit.shed"
EARLY_KEY = "servekit.early"
ADMITTED_KEY = "servekit.admitted"  # let in by the overload gate as the connection parsed its head
# The body of every such refusal: a constant, whether the connection or the app answers it.
SHED_BODY = b'{"error":"the server is overloaded: its requests wait longer than its target; retry later"}'


class FullQueueResponse(Response):
    """The 503 of a full queue (``unavailable(..., full=True)``): the overload gate takes it as the most the server
    holds at once (protocols/app.py)."""


def error_response(exc: ServekitError, table: Mapping[ErrorCode, int]) -> Response:
    status = table.get(exc.code, 500)
    headers = {"Retry-After": RETRY_AFTER_SECONDS} if status in RETRY_STATUSES else None
    kind = FullQueueResponse if exc.details.get("full") else Response
    return kind(dumps({"error": exc.message}), status_code=status, media_type=JSON_TYPE, headers=headers)


class InferenceHTTPResponse(Response):
    """An inference answer whose body is already bytes: headers are built as bytes directly, skipping
    Starlette's generic header handling on the hot path. Carries the phase timings as headers."""

    def __init__(
        self, body: bytes, media_type: str, resp: InferenceResponse, extra: tuple[tuple[bytes, bytes], ...] = ()
    ) -> None:
        t = resp.timings
        self.status_code = 200
        self.body = body
        self.background = None
        self.model_version = str(resp.version)
        self.model_s = t.model_s  # for the overload gate: the rest of the server time is waiting
        self.media_type = media_type
        self.raw_headers = [
            (b"content-length", b"%d" % len(body)),
            (b"content-type", media_type.encode("latin-1")),
            (b"x-servekit-model-version", self.model_version.encode()),
            (b"x-servekit-queue-ms", b"%.3f" % (t.queue_s * 1e3)),
            (b"x-servekit-model-ms", b"%.3f" % (t.model_s * 1e3)),
            (b"x-servekit-total-ms", b"%.3f" % (t.total_s * 1e3)),
            *extra,
        ]


class StreamedHTTPResponse(Response):
    """A model's answer in pieces, each sent (chunked) as it comes. A model failure midway is logged once, with a
    request id and its cause, and the body is left without its last chunk (the server closes the connection), so
    the client sees a broken stream, never a complete one; a client that leaves closes the model's stream."""

    def __init__(self, pieces: AsyncIterator[bytes], media_type: str, version: int, protocol: str, model: str) -> None:
        self.status_code = 200
        self.background = None
        self.body = b""
        self.model_version = str(version)
        self.media_type = media_type
        self._pieces = pieces
        self._where = (protocol, model)
        self.raw_headers = [
            (b"content-type", media_type.encode("latin-1")),
            (b"x-servekit-model-version", self.model_version.encode()),
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        sending = asyncio.ensure_future(self._send(send))
        leaving = asyncio.ensure_future(_disconnect(receive))
        try:
            await asyncio.wait({sending, leaving}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sending, leaving):
                task.cancel()
            await asyncio.gather(sending, leaving, return_exceptions=True)
            close = getattr(self._pieces, "aclose", None)
            if close is not None:
                await close()

    async def _send(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        try:
            async for piece in self._pieces:
                await send({"type": "http.response.body", "body": piece, "more_body": True})
        except ServekitError as exc:
            cause = exc.details.get("cause") or (exc.__cause__ and f"{type(exc.__cause__).__name__}: {exc.__cause__}")
            log.error(
                "request %s: %s stream (model %r) broke off midway: %s%s",
                secrets.token_hex(8),
                *self._where,
                exc.message,
                f": {cause}" if cause else "",
            )
            return  # no last chunk: the client's stream ends broken
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


_LOOPBACK = ("127.", "::1", "::ffff:127.")
_SERVED_MODELS = re.compile(r"; models: [^;]*$")
REQUEST_ID_HEADER = "x-servekit-request-id"
AUTHENTICATED_KEY = "servekit.authenticated"  # set in the ASGI scope by the authentication front


def trusted_caller(scope: Mapping[str, Any] | None) -> bool:
    """A caller on loopback or authenticated: told which models exist when it names one that does not."""
    if scope is None:
        return False
    if scope.get(AUTHENTICATED_KEY):
        return True
    client: Any = scope.get("client")
    return bool(client) and str(client[0]).startswith(_LOOPBACK)


class RequestRunner:
    """Runs one request's handler for a protocol: a ServekitError becomes the protocol's error response (its
    one status table), a bug of ours a 500 in the same shape, and every request on a configured model is
    reported to the metrics observer with its neutral error code.

    Error bodies say what the client can act on and no more: a model failure or a bug of ours is logged in
    full with a request id, and the body carries the id (also in ``x-servekit-request-id``), not the exception;
    the list of served models in a 404 is only for callers on loopback or authenticated."""

    def __init__(
        self,
        protocol: str,
        table: Mapping[ErrorCode, int],
        observer: RequestObserver | None,
        known_model: Callable[[str], bool] = lambda _: True,
    ) -> None:
        self.protocol = protocol
        self.table = table
        self.observer = observer
        self.known_model = known_model

    async def run(
        self,
        model: str,
        api: str,
        fn: Callable[[], Awaitable[Response]],
        scope: Mapping[str, Any] | None = None,
    ) -> Response:
        started = time.perf_counter()
        code: ErrorCode | None = None
        try:
            response = await fn()
        except ServekitError as exc:
            code = exc.code
            response = self._error(exc, model, api, scope)
        except Exception as exc:  # a bug of ours: answer in the protocol's shape and keep serving
            code = ErrorCode.INTERNAL
            rid = secrets.token_hex(8)
            log.exception("request %s: unexpected error in %s %s (model %r)", rid, self.protocol, api, model)
            response = _with_request_id(
                error_response(
                    ServekitError(ErrorCode.INTERNAL, f"internal server error (request id {rid})"), self.table
                ),
                rid,
            )
            del exc
        # Only configured models get metric labels, so arbitrary names in URLs cannot grow the label set.
        if self.observer is not None and model and self.known_model(model):
            version = getattr(response, "model_version", None) or response.headers.get("x-servekit-model-version", "")
            self.observer.on_request(
                model=model,
                version=version,
                api=api,
                protocol=self.protocol,
                code=code,
                seconds=time.perf_counter() - started,
            )
        return response

    def _error(self, exc: ServekitError, model: str, api: str, scope: Mapping[str, Any] | None) -> Response:
        cause = exc.details.get("cause")
        server_side = exc.code in (ErrorCode.MODEL_ERROR, ErrorCode.INTERNAL)
        if server_side or cause:  # logged with an id; a client error carrying user code's text too (as info)
            rid = secrets.token_hex(8)
            log.log(
                logging.ERROR if server_side else logging.INFO,
                "request %s: %s %s (model %r): %s%s",
                rid,
                self.protocol,
                api,
                model,
                exc.message,
                f": {cause}" if cause else "",
                exc_info=server_side and exc.__cause__ is not None and exc.__cause__,
            )
            public = ServekitError(exc.code, f"{exc.message} (request id {rid}; the server log has the details)")
            return _with_request_id(error_response(public, self.table), rid)
        if "; models: " in exc.message and not trusted_caller(scope):
            return error_response(ServekitError(exc.code, _SERVED_MODELS.sub("", exc.message)), self.table)
        return error_response(exc, self.table)


def _with_request_id(response: Response, rid: str) -> Response:
    response.headers[REQUEST_ID_HEADER] = rid
    return response
