"""Internal request/response types, independent of any wire format."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy.typing as npt

from servekit.types import PREDICT_METHOD

# Key an adapter uses when the wire format names no input (a bare tensor for a one-input signature).
ONLY_INPUT = ""


@dataclass(slots=True)
class InferenceRequest:
    model: str
    inputs: dict[str, npt.NDArray[Any]]
    version: int | None = None
    label: str | None = None
    signature: str | None = None
    method: str = PREDICT_METHOD
    outputs: tuple[str, ...] | None = None  # None = all outputs of the signature
    id: str = ""
    timeout: float | None = None  # seconds a request may wait in a batch queue


@dataclass(slots=True)
class Timings:
    queue_s: float = 0.0
    model_s: float = 0.0
    total_s: float = 0.0


@dataclass(slots=True)
class InferenceResponse:
    model: str
    version: int
    signature: str
    outputs: dict[str, npt.NDArray[Any]]
    class_labels: tuple[str, ...] = ()
    timings: Timings = field(default_factory=Timings)
    id: str = ""
