"""Internal request/response types, independent of any wire format."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias

import numpy.typing as npt

from servekit.types import PREDICT_METHOD, Signature

# Key an adapter uses when the wire format names no input (a bare tensor for a one-input signature).
ONLY_INPUT = ""

Tensors: TypeAlias = dict[str, npt.NDArray[Any]]


class Payload(Protocol):
    """A request body whose tensors depend on the signature the leased version offers (TF ``:classify``
    examples, a SageMaker body that may name its signature). Decoded only once the version is chosen, so one
    request takes one lease and chooses its signature once."""

    def signature_name(self) -> str | None: ...

    def tensors(self, sig: Signature) -> Tensors: ...


Inputs: TypeAlias = Tensors | Payload


@dataclass(frozen=True, slots=True)
class RawBody:
    """A body as it came (SageMaker ``/invocations``), for models that decode their own (``inference.py``)."""

    body: bytes
    content_type: str
    accept: str


@dataclass(slots=True)
class InferenceRequest:
    model: str
    inputs: Inputs
    version: int | None = None
    label: str | None = None
    signature: str | None = None
    method: str = PREDICT_METHOD
    outputs: tuple[str, ...] | None = None  # None = all outputs of the signature
    id: str = ""
    timeout: float | None = None  # seconds a request may wait in a batch queue
    raw: RawBody | None = None  # given to a model that takes raw bodies instead of ``inputs``
    # Completes when the client has gone away; a request still waiting for a model thread is then dropped.
    disconnected: Callable[[], Awaitable[object]] | None = None
    # The server holds no other request (counted by its transport): with batching on, nothing could join this
    # request's batch, so a cheap model may run it on the event loop (inference/service.py).
    alone: bool = False


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
    # (body, content type) from a model that answered a RawBody itself; the body an async iterator of pieces when the
    # model streams (servekit.serving.core.stream.ModelStream)
    raw: tuple[bytes | AsyncIterator[bytes], str] | None = None
