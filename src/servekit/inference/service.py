"""The protocol-neutral inference service: resolve, validate, lease, run on a worker thread, answer.

Protocol fronts talk only to this service: inference, metadata, readiness and status. One request takes one
lease and chooses its signature once, so a hot swap cannot split it across two versions.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from servekit._utils.threads import ModelThreads
from servekit.batching.scheduler import BatchScheduler
from servekit.errors import not_found
from servekit.inference.admission import Admission
from servekit.inference.call import model_failure, prepare
from servekit.inference.ports import CaptureSink, InferenceObserver
from servekit.inference.schema import InferenceRequest, InferenceResponse, RawBody, Tensors, Timings
from servekit.runtime.base import RawInvocable, concurrency_of
from servekit.runtime.inline import OVERRUN, RunCost, observe, runs_inline, size_class
from servekit.serving.manager import Lease, ModelManager, VersionStatus
from servekit.types import Signature

log = logging.getLogger(__name__)


def _timed(predict: Callable[[str, Tensors], Tensors], signature: str, inputs: Tensors) -> tuple[Tensors, float]:
    """The model's outputs and how long the call itself took, measured on the thread that ran it."""
    t0 = time.perf_counter()
    outputs = predict(signature, inputs)
    return outputs, time.perf_counter() - t0


def _log_move(key: tuple[str, int, str, int], cost: RunCost, limit_s: float) -> None:
    model, version, signature, size = key
    what = f"model '{model}' version {version} signature '{signature}', requests of {1 << (size - 1)}+ elements"
    if cost.inline:
        log.info("%s: run on the event loop (fastest of %d thread runs %.1f us)", what, cost.runs, cost.fastest * 1e6)
    else:
        log.info(
            "%s: back on the model threads (most runs over %.0f us); measured again after %d requests",
            what,
            OVERRUN * limit_s * 1e6,
            cost.wait,
        )


def _elements(inputs: Tensors) -> int:
    return sum(int(value.size) for value in inputs.values())


@dataclass(frozen=True, slots=True)
class ModelMetadata:
    model: str
    version: int
    platform: str
    signatures: dict[str, Signature]
    versions: tuple[int, ...]


class InferenceService:
    def __init__(
        self,
        manager: ModelManager,
        threads: ModelThreads,
        batching: BatchScheduler | None = None,
        observer: InferenceObserver | None = None,
        capture: CaptureSink | None = None,
        admission: Admission | None = None,
        inline_limit_s: float = 0.0,
    ) -> None:
        self._manager = manager
        self._admission = admission
        self._threads = threads
        self._batching = batching
        self._observer = observer
        self._capture = capture
        # Requests whose model runs are measured shorter than this run on the event loop (inference/inline.py).
        self._inline_limit_s = inline_limit_s
        self._costs: dict[tuple[str, int, str, int], RunCost] = {}

    # ---- what a front asks about models ------------------------------------------------------------------
    @property
    def model_names(self) -> list[str]:
        return self._manager.model_names

    def has_model(self, model: str) -> bool:
        return self._manager.has_model(model)

    def all_ready(self) -> bool:
        """Every configured model has a version available (and there is at least one model)."""
        return self._manager.all_ready()

    def is_ready(self, model: str, version: int | None = None) -> bool:
        return self._manager.is_ready(model, version)

    def status(self, model: str, version: int | None = None, label: str | None = None) -> list[VersionStatus]:
        """The model's versions and their states; with a version or label, only that one (404 if unknown)."""
        statuses = self._manager.status(model)
        if label is None and version is None:
            return statuses
        wanted = self._manager.resolve(model, version, label) if label else version
        chosen = [s for s in statuses if s.version == wanted]
        if not chosen:
            listing = ", ".join(str(s.version) for s in statuses) or "none"
            raise not_found(f"model '{model}' has no version {wanted}; versions: {listing}")
        return chosen

    def metadata(self, model: str, version: int | None = None, label: str | None = None) -> ModelMetadata:
        with self._manager.lease(model, version, label) as lease:
            return ModelMetadata(
                model,
                lease.version,
                lease.servable.platform,
                dict(lease.servable.signatures),
                tuple(self._manager.available_versions(model)),
            )

    # ---- inference ----------------------------------------------------------------------------------------
    async def infer(self, req: InferenceRequest) -> InferenceResponse:
        started = time.perf_counter()
        with self._manager.lease(req.model, req.version, req.label) as lease:
            if req.raw is not None and isinstance(lease.servable, RawInvocable):
                return await self._invoke_raw(req, req.raw, lease, started)
            sig, inputs = prepare(
                lease.servable.signatures, req.model, req.inputs, req.signature, req.method, req.outputs
            )
            queue = self._batching.queue_for(req.model, lease.version, lease.servable, sig) if self._batching else None
            queue_s = 0.0
            t0 = time.perf_counter()
            try:
                if queue is not None:
                    result = await queue.submit(inputs, req.timeout)
                    outputs, queue_s, model_s = result.outputs, result.queue_s, result.model_s
                else:
                    key = (req.model, lease.version, sig.name, size_class(_elements(inputs)))
                    cost = self._costs.get(key)
                    if cost is None:
                        cost = self._costs[key] = RunCost(eligible=concurrency_of(lease.servable).releases_gil)
                    if runs_inline(cost, self._inline_limit_s):
                        outputs = lease.servable.predict(sig.name, inputs)
                        model_s = time.perf_counter() - t0
                        observe(cost, model_s, True, self._inline_limit_s)
                        if not cost.inline:
                            _log_move(key, cost, self._inline_limit_s)
                    else:
                        if self._admission is not None:
                            work = self._admission.submit(
                                req.model,
                                _timed,
                                (lease.servable.predict, sig.name, inputs),
                                req.timeout,
                                req.disconnected,
                            )
                        else:
                            work = self._threads.submit(_timed, lease.servable.predict, sig.name, inputs)
                        lease.hold(work)
                        outputs, run_s = await asyncio.shield(work)
                        model_s = time.perf_counter() - t0
                        if not cost.inline:  # requests handed over before it moved onto the loop finish here
                            observe(cost, run_s, False, self._inline_limit_s)
                            if cost.inline:
                                _log_move(key, cost, self._inline_limit_s)
            except Exception as exc:
                raise model_failure(exc, req.model, lease.version) from exc
            if req.outputs is not None:
                outputs = {k: v for k, v in outputs.items() if k in req.outputs}
            total_s = time.perf_counter() - started
            if self._observer is not None:
                self._observer.on_inference(req.model, lease.version, queue_s, model_s, total_s)
            if self._capture is not None:
                self._capture.offer_tensors(req.model, lease.version, inputs, outputs, req.id or None)
            return InferenceResponse(
                model=req.model,
                version=lease.version,
                signature=sig.name,
                outputs=outputs,
                class_labels=sig.class_labels,
                timings=Timings(queue_s, model_s, total_s),
                id=req.id,
            )

    async def _invoke_raw(self, req: InferenceRequest, raw: RawBody, lease: Lease, started: float) -> InferenceResponse:
        servable = lease.servable
        assert isinstance(servable, RawInvocable)
        t0 = time.perf_counter()
        work = self._threads.submit(servable.invoke, raw.body, raw.content_type, raw.accept)
        lease.hold(work)
        try:
            out, ctype = await asyncio.shield(work)
        except Exception as exc:
            raise model_failure(exc, req.model, lease.version) from exc
        now = time.perf_counter()
        if self._capture is not None:
            self._capture.offer_bytes(req.model, lease.version, raw.content_type, raw.body, ctype, out, req.id or None)
        return InferenceResponse(
            model=req.model,
            version=lease.version,
            signature="",
            outputs={},
            timings=Timings(0.0, now - t0, now - started),
            id=req.id,
            raw=(out, ctype),
        )
