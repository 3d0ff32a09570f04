"""InvokeEndpointWithResponseStream on ``servekit up``: the one operation whose answer is not one body. The call is
authenticated and parsed as every other (botocore's model), routed by the gateway like InvokeEndpoint, and the
instance's answer is re-framed as AWS event-stream messages (``PayloadPart``) and sent on as each piece arrives.
An error before the first piece is the operation's ordinary error response; one midway, once the 200 is sent, is
a ``ModelStreamError`` (or ``InternalStreamFailure``) event, which boto3 raises while iterating."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from starlette.types import Send

from servekit.aws import Api, ApiError
from servekit.aws.errors import model_error as model_error_response
from servekit.aws.errors import service_unavailable, validation_error
from servekit.aws.eventstream import CONTENT_TYPE, payload_part, stream_error
from servekit.aws.protocol import Response, request_id
from servekit.edge.metrics import EdgeMetrics
from servekit.gateway.service import Gateway, GatewayError

log = logging.getLogger(__name__)
OPERATION_SUFFIX = (
    "/invocations-response-stream"  # its request URI: /endpoints/{EndpointName}/invocations-response-stream
)


def api_error(exc: GatewayError) -> ApiError:
    """A gateway failure as the runtime API answers it (InvokeEndpoint's and the streaming call's alike)."""
    if exc.code == "ModelError":
        status = exc.extra.get("OriginalStatusCode", 0)
        original = str(exc.extra.get("OriginalMessage", ""))
        return model_error_response(exc.message, status if isinstance(status, int) else 0, original)
    if exc.code == "ServiceUnavailable":
        return service_unavailable(exc.message)
    if exc.code == "ThrottlingException":  # a serverless variant at its MaxConcurrency: refused at once
        return ApiError("ThrottlingException", exc.message, 429)
    code = exc.extra.get("ErrorCode")
    return validation_error(exc.message, code if isinstance(code, str) else None)


async def _answer(send: Send, response: Response) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": response.status,
            "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in response.headers.items()],
        }
    )
    await send({"type": "http.response.body", "body": response.body})


async def stream_invocation(
    api: Api,
    gateway: Gateway,
    metrics: EdgeMetrics,
    instances: Callable[[str, str], int],
    method: str,
    raw_path: str,
    headers: Mapping[str, str],
    body: bytes,
    send: Send,
    router: Callable[[str, str | None], str] | None = None,
) -> bool:
    """Serve the request if it is InvokeEndpointWithResponseStream (True), else leave it alone (False). ``router``:
    (endpoint, InferenceComponentName) -> the routing key to stream from (an inference component's copies)."""
    proto = api.route(method, raw_path, headers)
    if proto is None:
        return False
    rid = request_id()
    began = time.perf_counter()
    endpoint = ""
    try:
        call = api.decode(proto, method, raw_path, headers, body)
        if call.operation != "InvokeEndpointWithResponseStream":
            return False
        p = call.params
        endpoint = str(p["EndpointName"])
        raw = p.get("Body") or b""
        route = router(endpoint, p.get("InferenceComponentName")) if router is not None else endpoint
        out = await gateway.invoke_stream(
            route,
            raw.encode() if isinstance(raw, str) else raw,
            p.get("ContentType"),
            p.get("Accept"),
            p.get("CustomAttributes"),
            p.get("TargetVariant"),
            p.get("InferenceId"),
        )
    except GatewayError as exc:
        metrics.invocation(endpoint if exc.code != "ValidationError" else "", "", exc.code)
        metrics.record_error(endpoint, exc, time.perf_counter() - began, instances)
        await _answer(send, api.error(proto, api_error(exc), rid))
        return True
    except Exception as exc:  # ApiError (a bad signature, a malformed call) or a bug: the usual error response
        await _answer(send, api.error(proto, exc, rid))
        return True
    assert out.stream is not None
    out_headers = {
        "content-type": CONTENT_TYPE,
        "x-amzn-requestid": rid,
        "x-amzn-sagemaker-content-type": out.content_type,
        "x-amzn-invoked-production-variant": out.variant,
    }
    if out.custom_attributes:
        out_headers["x-amzn-sagemaker-custom-attributes"] = out.custom_attributes
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in out_headers.items()],
        }
    )
    outcome = "ok"
    try:
        async for piece in out.stream:
            await send({"type": "http.response.body", "body": payload_part(piece), "more_body": True})
    except GatewayError as exc:
        outcome = exc.code
        await send(
            {"type": "http.response.body", "body": stream_error(exc.code, exc.message, "ModelError"), "more_body": True}
        )
    except Exception:
        outcome = "InternalStreamFailure"
        log.exception("InvokeEndpointWithResponseStream %s (request id %s)", endpoint, rid)
        failure = stream_error("InternalStreamFailure", f"the stream failed (request id {rid}; the server log has it)")
        await send({"type": "http.response.body", "body": failure, "more_body": True})
    finally:
        await out.stream.aclose()  # type: ignore[attr-defined]  # an async generator: its connection released
    await send({"type": "http.response.body", "body": b"", "more_body": False})
    metrics.invocation(endpoint, out.variant, outcome)
    if outcome == "ok":
        metrics.record_ok(endpoint, out.variant, None, time.perf_counter() - began, instances, out.config_name)
    return True
