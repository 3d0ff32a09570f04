"""Interfaces the inference layer calls outward; observability and capture implement them, the core wires them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import numpy.typing as npt

from servekit.errors import ErrorCode


class RequestObserver(Protocol):
    """Told every request a protocol front answered: ``code`` is None for success, else the neutral error code
    (each front maps codes to its own statuses; metrics stay the same for REST and gRPC)."""

    def on_request(
        self, *, model: str, version: str, api: str, protocol: str, code: ErrorCode | None, seconds: float
    ) -> None: ...


class InferenceObserver(Protocol):
    """Told the phase split of every successful inference (queue wait, model time, total in the service)."""

    def on_inference(self, model: str, version: int, queue_s: float, model_s: float, total_s: float) -> None: ...


class CaptureSink(Protocol):
    """Takes one served exchange for data capture; must never block (sample, then hand over or drop)."""

    def offer_tensors(
        self,
        model: str,
        version: int,
        inputs: Mapping[str, npt.NDArray[Any]],
        outputs: Mapping[str, npt.NDArray[Any]],
        inference_id: str | None = None,
    ) -> bool:
        """The named tensors the model was given and gave back (as validated and cast, whatever the protocol);
        ``inference_id`` is the caller's id for the exchange when it sent one."""
        ...

    def offer_bytes(
        self,
        model: str,
        version: int,
        input_type: str,
        input_body: bytes,
        output_type: str,
        output_body: bytes,
        inference_id: str | None = None,
    ) -> bool:
        """A body a model decoded itself (SageMaker ``inference.py``) and its answer, as they were."""
        ...
