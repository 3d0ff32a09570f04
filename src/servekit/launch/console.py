"""Wiring of the web console into ``servekit up``: the console's :data:`~servekit.console.ApiCall` over the plane's
own API (encode as a client's JSON request, validate against the service model, dispatch, encode the answer as
the wire would carry it) and its key lookup over the home's credentials. The console imports neither.

The call reaches every service of the plane that speaks AWS's JSON protocol, the way boto3 would: SageMaker,
CloudWatch, Application Auto Scaling and CloudWatch Logs (the endpoint's and the job's log lines)."""

from __future__ import annotations

import json
from typing import Any

from starlette.applications import Starlette

from servekit.aws import Call, Credentials
from servekit.aws.protocol import JsonProtocol
from servekit.console import ApiCall, ApiFailure, ConsoleConfig, create_app
from servekit.edge.plane import ControlPlane


def console_for(plane: ControlPlane, credentials: Credentials, resolution_s: int) -> Starlette:
    def keys(access_key_id: str) -> tuple[str, str] | None:
        key = credentials.lookup(access_key_id)
        return (key.secret_access_key, key.scope) if key is not None else None

    return create_app(api_call(plane, credentials), keys, ConsoleConfig(resolution_s=resolution_s))


def api_call(plane: ControlPlane, credentials: Credentials) -> ApiCall:
    """The console's way into ``plane``'s API: ``(service, operation, params, acting key or None)`` to the answer's
    JSON, or :class:`ApiFailure` with the code, message and status the API answered."""

    async def call(service: str, operation: str, params: dict[str, Any], acting: str | None) -> dict[str, Any]:
        proto = plane.api.protocols.get(service)
        if not isinstance(proto, JsonProtocol):
            raise ApiFailure("UnknownOperationException", f"the console does not call {service}", 400)
        key = credentials.lookup(acting) if acting else None
        if acting and key is None:
            raise ApiFailure("UnrecognizedClientException", "The access key is no longer valid.", 403)
        headers = {"X-Amz-Target": f"{proto.spec.target_prefix}.{operation}", "Content-Type": proto.spec.content_type}
        try:
            parsed = proto.parse(headers, json.dumps(params).encode())
            request = Call(service, parsed.name, parsed.params, key)
            response = plane.api.encode(request, await plane.dispatch(request))
        except Exception as exc:  # as the API answers it: an ApiError's own status, anything else a logged 500
            response = plane.api.error(proto, exc)
        answer: dict[str, Any] = json.loads(response.body or b"{}")
        if response.status != 200:
            code = str(answer.get("__type", "InternalFailure")).rpartition("#")[2]
            message = str(answer.get("message") or answer.get("Message") or "")
            raise ApiFailure(code, message, response.status)
        return answer

    return call
