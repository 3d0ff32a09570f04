"""What every adapter needs from the server, passed in explicitly."""

from __future__ import annotations

from dataclasses import dataclass

from servekit.inference.ports import RequestObserver
from servekit.inference.service import InferenceService


@dataclass(frozen=True, slots=True)
class AdapterContext:
    service: InferenceService
    max_request_bytes: int
    observer: RequestObserver | None = None
    sagemaker_default_accept: str = "application/json"
