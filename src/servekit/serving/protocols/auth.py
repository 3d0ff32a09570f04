"""Bearer-token authentication for the whole REST front (``serve --auth_token_file``).

Checked in the outermost ASGI app, before any route, so the inference fast path is covered too. Health checks
(``/v2/health/live``, ``/v2/health/ready``, ``/ping``) stay open: load balancers and SageMaker call them
without credentials. Inference requests need an inference token; everything else (status, metadata,
metrics) an admin token. Tokens are compared in constant time, and the ``Authorization`` header is taken out
of the request before it reaches an adapter, so it cannot end up in a log, a capture file or a handler model.
"""

from __future__ import annotations

import hmac
from collections.abc import MutableMapping
from typing import Any

from starlette.responses import Response

from servekit.config.models import AuthTokens
from servekit.serving.protocols.http import AUTHENTICATED_KEY, json_response

HEALTH_PATHS = frozenset({"/v2/health/live", "/v2/health/ready", "/ping"})
_AUTHORIZATION = b"authorization"
_REALM = 'Bearer realm="servekit"'


class BearerAuth:
    """Decides whether one HTTP request may go on; answers 401/403 in the servekit JSON error shape if not."""

    def __init__(self, tokens: AuthTokens) -> None:
        self._inference = tuple(t.encode() for t in sorted(tokens.inference))
        self._admin = tuple(t.encode() for t in sorted(tokens.admin))

    def check(self, scope: MutableMapping[str, Any], inference: bool) -> Response | None:
        """None if the request may go on (it is then marked authenticated), else the response refusing it."""
        if scope["path"] in HEALTH_PATHS:
            return None
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        presented: bytes | None = None
        kept = []
        for name, value in headers:
            if name == _AUTHORIZATION:
                scheme, _, credentials = value.strip().partition(b" ")
                if scheme.lower() == b"bearer":
                    presented = credentials.strip()
            else:
                kept.append((name, value))
        if presented is None:
            return _refuse(401, "authentication required: send Authorization: Bearer <token>", _REALM)
        scope["headers"] = kept
        wanted, other = (self._inference, self._admin) if inference else (self._admin, self._inference)
        if _matches(presented, wanted):
            scope[AUTHENTICATED_KEY] = True
            return None
        if _matches(presented, other):
            kind = "inference" if inference else "status, metadata and metrics"
            return _refuse(403, f"this token may not call {kind} endpoints", f'{_REALM}, error="insufficient_scope"')
        return _refuse(401, "invalid bearer token", f'{_REALM}, error="invalid_token"')


def _matches(presented: bytes, tokens: tuple[bytes, ...]) -> bool:
    # Every token is compared, each in constant time: the answer's timing says nothing about which or how much
    # of one matched.
    found = False
    for token in tokens:
        found |= hmac.compare_digest(presented, token)
    return found


def _refuse(status: int, message: str, challenge: str) -> Response:
    return json_response({"error": message}, status=status, headers={"WWW-Authenticate": challenge})
