"""Interfaces the inference layer calls outward; observability implements them, the entry point wires them."""

from __future__ import annotations

from typing import Protocol


class RequestObserver(Protocol):
    def on_request(self, *, model: str, version: str, api: str, protocol: str, status: int, seconds: float) -> None: ...


class InferenceObserver(Protocol):
    """Told the phase split of every successful inference (queue wait, model time, total in the service)."""

    def on_inference(self, model: str, version: int, queue_s: float, model_s: float, total_s: float) -> None: ...


class CaptureSink(Protocol):
    """Takes one served exchange for data capture; must never block (sample, then hand over or drop)."""

    def offer(
        self,
        model: str,
        version: int,
        input_type: str | None,
        input_body: bytes | None,
        output_type: str | None,
        output_body: bytes | None,
    ) -> bool: ...
