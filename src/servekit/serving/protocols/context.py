"""What every adapter needs from the server, passed in explicitly."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from servekit.errors import invalid
from servekit.serving.core.multi_model import MultiModelHost
from servekit.serving.core.ports import RequestObserver
from servekit.serving.core.service import InferenceService
from servekit.serving.protocols.http import Backlog, scope_header
from servekit.serving.protocols.large import DecodeLane

TIMEOUT_HEADER = "x-servekit-timeout-ms"
_TIMEOUT_KEY = TIMEOUT_HEADER.encode()
_MAX_TIMEOUT_MS = 24 * 3600 * 1e3


@dataclass(frozen=True, slots=True)
class AdapterContext:
    service: InferenceService
    max_request_bytes: int
    observer: RequestObserver | None = None
    sagemaker_default_accept: str = "application/json"
    request_timeout_s: float | None = None  # default deadline for waiting in a batch queue or for a thread
    large: DecodeLane = field(default_factory=DecodeLane)
    multi_model: MultiModelHost | None = None  # SageMaker's multi-model container API, when serving that way
    # Requests pending in the server, where its transport counts them (None: unknown, so never alone).
    backlog: Backlog | None = None

    def alone(self) -> bool:
        """Whether the request being handled is the only one the server holds (see :class:`Backlog`)."""
        return self.backlog is not None and self.backlog.pending == 1

    def timeout(self, scope: Mapping[str, Any]) -> float | None:
        """The request's deadline: ``x-servekit-timeout-ms`` when sent, else the server default."""
        raw = scope_header(scope, _TIMEOUT_KEY)
        if raw is None:
            return self.request_timeout_s
        try:
            ms = float(raw)
        except ValueError:
            raise invalid(f"{TIMEOUT_HEADER} must be a number of milliseconds, got {raw!r}") from None
        if not 0 < ms <= _MAX_TIMEOUT_MS:  # also refuses nan and inf
            raise invalid(f"{TIMEOUT_HEADER} must be > 0 and at most {_MAX_TIMEOUT_MS:.0f} ms, got {raw!r}")
        return ms / 1e3
