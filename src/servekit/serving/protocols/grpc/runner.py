"""What every gRPC servicer shares: one request's errors as gRPC statuses (the same messages as REST, through the
one error table), metrics, deadlines and the model spec."""

from __future__ import annotations

import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

import grpc

from servekit.errors import ErrorCode, ServekitError, invalid
from servekit.serving.core.ports import RequestObserver
from servekit.serving.core.service import InferenceService
from servekit.serving.protocols.errors import GRPC_OVERLOADED, GRPC_STATUS

log = logging.getLogger(__name__)

T = TypeVar("T")
# grpc.aio.ServicerContext: grpc ships no type hints, so it is Any to mypy either way.
Ctx: TypeAlias = Any
_LOOPBACK = ("ipv4:127.", "ipv6:[::1]", "ipv6:%5B::1%5D", "unix:")
_SERVED_MODELS = re.compile(r"; models: [^;]*$")
REQUEST_ID_KEY = "x-servekit-request-id"


@dataclass(frozen=True, slots=True)
class GrpcContext:
    service: InferenceService
    observer: RequestObserver | None = None
    request_timeout_s: float | None = None  # the server's default deadline (--request_timeout_ms)

    def timeout(self, context: Ctx) -> float | None:
        """The sooner of the client's gRPC deadline and the server's default."""
        remaining: float | None = context.time_remaining()
        if remaining is None:
            return self.request_timeout_s
        if self.request_timeout_s is None:
            return max(remaining, 0.0)
        return max(min(remaining, self.request_timeout_s), 0.0)


def trusted_peer(context: Ctx) -> bool:
    """A caller on loopback is told which models exist when it names one that does not (as REST does)."""
    return str(context.peer()).startswith(_LOOPBACK)


class GrpcRunner:
    """Runs one RPC for a protocol: a ServekitError becomes its gRPC status with the REST message, a bug of ours
    INTERNAL with a request id (the log has the rest), and every request on a configured model is reported to
    the metrics observer with its neutral error code."""

    def __init__(self, protocol: str, ctx: GrpcContext) -> None:
        self.protocol = protocol
        self.ctx = ctx

    async def run(
        self,
        model: str,
        api: str,
        context: Ctx,
        fn: Callable[[], Awaitable[tuple[T, str]]],
    ) -> T:
        """``fn`` answers the reply and the model version that served it (for the metrics label)."""
        started = time.perf_counter()
        code: ErrorCode | None = None
        version = ""
        try:
            reply, version = await fn()
            return reply
        except ServekitError as exc:
            code = exc.code
            status, message = self._status(exc, model, api, context)
        except Exception:  # a bug of ours: answer INTERNAL and keep serving
            code = ErrorCode.INTERNAL
            rid = secrets.token_hex(8)
            log.exception("request %s: unexpected error in %s %s (model %r)", rid, self.protocol, api, model)
            context.set_trailing_metadata(((REQUEST_ID_KEY, rid),))
            status, message = grpc.StatusCode.INTERNAL, f"internal server error (request id {rid})"
        finally:
            observer = self.ctx.observer
            if observer is not None and model and self.ctx.service.has_model(model):
                observer.on_request(
                    model=model,
                    version=version,
                    api=api,
                    protocol=self.protocol,
                    code=code,
                    seconds=time.perf_counter() - started,
                )
        await context.abort(status, message)
        raise AssertionError("unreachable: abort raises")  # pragma: no cover

    def _status(self, exc: ServekitError, model: str, api: str, context: Ctx) -> tuple[grpc.StatusCode, str]:
        name = GRPC_STATUS.get(exc.code, "INTERNAL")
        if exc.code is ErrorCode.UNAVAILABLE and model and self.ctx.service.is_ready(model):
            name = GRPC_OVERLOADED
        status = grpc.StatusCode[name]
        cause = exc.details.get("cause")
        server_side = exc.code in (ErrorCode.MODEL_ERROR, ErrorCode.INTERNAL)
        if server_side or cause:  # logged with an id; a client error carrying user code's text too (as info)
            rid = secrets.token_hex(8)
            log.log(
                logging.ERROR if server_side else logging.INFO,
                "request %s: %s %s (model %r): %s%s",
                *(rid, self.protocol, api, model, exc.message, f": {cause}" if cause else ""),
                exc_info=server_side and exc.__cause__ is not None and exc.__cause__,
            )
            context.set_trailing_metadata(((REQUEST_ID_KEY, rid),))
            return status, f"{exc.message} (request id {rid}; the server log has the details)"
        if "; models: " in exc.message and not trusted_peer(context):
            return status, _SERVED_MODELS.sub("", exc.message)
        return status, exc.message


def model_name(name: str) -> str:
    if not name:
        raise invalid("model_spec.name is required: the name of the model to run")
    return name
