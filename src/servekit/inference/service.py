"""The protocol-neutral inference service: resolve, validate, lease, run on a worker thread, answer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass

from servekit._utils.threads import ModelThreads
from servekit.batching.scheduler import BatchScheduler
from servekit.errors import ErrorCode, ServekitError, invalid, not_found
from servekit.inference.ports import InferenceObserver
from servekit.inference.schema import InferenceRequest, InferenceResponse, Timings
from servekit.inference.validate import validate_inputs
from servekit.runtime.base import RawInvocable
from servekit.serving.manager import ModelManager, VersionStatus
from servekit.types import DEFAULT_SIGNATURE, PREDICT_METHOD, Signature


@dataclass(frozen=True, slots=True)
class ModelMetadata:
    model: str
    version: int
    platform: str
    signatures: dict[str, Signature]
    versions: tuple[int, ...]


def pick_signature(signatures: Mapping[str, Signature], name: str | None, method: str, model: str) -> Signature:
    if name:
        sig = signatures.get(name)
        if sig is None:
            listing = ", ".join(sorted(signatures))
            raise not_found(f"model '{model}' has no signature '{name}'; signatures: {listing}")
    elif method == PREDICT_METHOD:
        sig = signatures.get(DEFAULT_SIGNATURE) or next(iter(signatures.values()))
    else:
        sig = next((s for s in signatures.values() if s.method == method), None)
        if sig is None:
            listing = ", ".join(sorted(signatures))
            raise invalid(f"model '{model}' has no signature with method {method}; signatures: {listing}")
    if method != PREDICT_METHOD and sig.method != method:
        raise invalid(f"signature '{sig.name}' of model '{model}' has method {sig.method}, not {method}")
    return sig


class InferenceService:
    def __init__(
        self,
        manager: ModelManager,
        threads: ModelThreads,
        batching: BatchScheduler | None = None,
        observer: InferenceObserver | None = None,
    ) -> None:
        self.manager = manager
        self._threads = threads
        self._batching = batching
        self._observer = observer

    async def infer(self, req: InferenceRequest) -> InferenceResponse:
        started = time.perf_counter()
        with self.manager.lease(req.model, req.version, req.label) as lease:
            sig = pick_signature(lease.servable.signatures, req.signature, req.method, req.model)
            inputs = validate_inputs(sig, req.inputs)
            if req.outputs is not None:
                wanted = [o.name for o in sig.outputs]
                unknown = [o for o in req.outputs if o not in wanted]
                if unknown and sig.validate:
                    raise invalid(f"unknown output(s) {', '.join(map(repr, unknown))}; {sig.describe()}")
            queue = self._batching.queue_for(req.model, lease.version, lease.servable, sig) if self._batching else None
            queue_s = 0.0
            t0 = time.perf_counter()
            try:
                if queue is not None:
                    result = await queue.submit(inputs, req.timeout)
                    outputs, queue_s, model_s = result.outputs, result.queue_s, result.model_s
                else:
                    work = self._threads.submit(lease.servable.predict, sig.name, inputs)
                    lease.hold(work)
                    outputs = await asyncio.shield(work)
                    model_s = time.perf_counter() - t0
            except ServekitError:
                raise
            except Exception as exc:
                raise ServekitError(
                    ErrorCode.MODEL_ERROR,
                    f"model '{req.model}' version {lease.version} raised {type(exc).__name__}: {exc}",
                ) from exc
            if req.outputs is not None:
                outputs = {k: v for k, v in outputs.items() if k in req.outputs}
            total_s = time.perf_counter() - started
            if self._observer is not None:
                self._observer.on_inference(req.model, lease.version, queue_s, model_s, total_s)
            return InferenceResponse(
                model=req.model,
                version=lease.version,
                signature=sig.name,
                outputs=outputs,
                class_labels=sig.class_labels,
                timings=Timings(queue_s, model_s, total_s),
                id=req.id,
            )

    async def invoke_raw(
        self, model: str, version: int | None, body: bytes, content_type: str, accept: str
    ) -> tuple[bytes, str, int] | None:
        """Hand a SageMaker body to a handler model; None when the model takes named tensors instead."""
        with self.manager.lease(model, version) as lease:
            servable = lease.servable
            if not isinstance(servable, RawInvocable):
                return None
            work = self._threads.submit(servable.invoke, body, content_type, accept)
            lease.hold(work)
            out, ctype = await asyncio.shield(work)
            return out, ctype, lease.version

    def metadata(self, model: str, version: int | None = None, label: str | None = None) -> ModelMetadata:
        with self.manager.lease(model, version, label) as lease:
            return ModelMetadata(
                model,
                lease.version,
                lease.servable.platform,
                dict(lease.servable.signatures),
                tuple(self.manager.available_versions(model)),
            )

    def status(self, model: str) -> list[VersionStatus]:
        return self.manager.status(model)
