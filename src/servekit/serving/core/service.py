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
from typing import TypeAlias

from servekit._utils.threads import ModelThreads
from servekit.errors import not_found
from servekit.serving.batching.scheduler import BatchScheduler
from servekit.serving.core.admission import Admission
from servekit.serving.core.call import model_failure, prepare
from servekit.serving.core.manager import Lease, ModelManager, VersionStatus
from servekit.serving.core.ports import CaptureSink, InferenceObserver
from servekit.serving.core.stream import ModelStream
from servekit.serving.runtime.base import RawInvocable, concurrency_of
from servekit.serving.runtime.inline import OVERRUN, RunCost, observe, runs_inline, size_class
from servekit.serving.schema import InferenceRequest, InferenceResponse, RawBody, Tensors, Timings
from servekit.types import Signature

log = logging.getLogger(__name__)


def _timed(predict: Callable[[str, Tensors], Tensors], signature: str, inputs: Tensors) -> tuple[Tensors, float]:
    """The model's outputs and how long the call itself took, measured on the thread that ran it."""
    t0 = time.perf_counter()
    outputs = predict(signature, inputs)
    return outputs, time.perf_counter() - t0


_Key: TypeAlias = tuple[str, int, str, int]  # model, version, signature, size class
_Tracked: TypeAlias = tuple[_Key, RunCost]


def _log_move(key: _Key, cost: RunCost, limit_s: float) -> None:
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
        # Requests whose model runs are measured shorter than this run on the event loop (runtime/inline.py).
        self._inline_limit_s = inline_limit_s
        self._costs: dict[_Key, RunCost] = {}

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
                    # A request alone in the server finds its queue idle: its batch would be itself, so a class
                    # measured cheap runs on the loop as that batch. Under load (others pending) requests always
                    # queue: running one on the loop would keep the next from joining a batch.
                    tracked = self._run_cost(req.model, lease, sig.name, inputs) if req.alone else None
                    cheap = tracked is not None and runs_inline(tracked[1], self._inline_limit_s)
                    ran = queue.run_alone(inputs) if cheap else None
                    result = ran if ran is not None else await queue.submit(inputs, req.timeout)
                    outputs, queue_s, model_s = result.outputs, result.queue_s, result.model_s
                    if tracked is not None:
                        self._observe(tracked, model_s, inline=ran is not None)
                else:
                    tracked = self._run_cost(req.model, lease, sig.name, inputs)
                    if tracked is not None and runs_inline(tracked[1], self._inline_limit_s):
                        outputs = lease.servable.predict(sig.name, inputs)
                        model_s = time.perf_counter() - t0
                        self._observe(tracked, model_s, inline=True)
                    else:
                        # Timed on the thread, around the model call alone (a tracked class's measure).
                        predict, args = _timed, (lease.servable.predict, sig.name, inputs)
                        if self._admission is not None:
                            work = self._admission.submit(req.model, predict, args, req.timeout, req.disconnected)
                        else:
                            work = self._threads.submit(predict, *args)
                        lease.hold(work)
                        outputs, run_s = await asyncio.shield(work)
                        # The model's own time is the run; the rest was waiting for a thread (and the hand-back).
                        model_s = run_s
                        queue_s = max(0.0, time.perf_counter() - t0 - run_s)
                        if tracked is not None:
                            self._observe(tracked, run_s, inline=False)
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

    def _run_cost(self, model: str, lease: Lease, signature: str, inputs: Tensors) -> _Tracked | None:
        """Where this request's size class of a native model stands (runtime/inline.py); None when inlining is off or
        the servable may block (a Python model): its requests always go to the threads and are not tracked."""
        if not self._inline_limit_s or not concurrency_of(lease.servable).releases_gil:
            return None
        key = (model, lease.version, signature, size_class(sum(int(v.size) for v in inputs.values())))
        cost = self._costs.get(key)
        if cost is None:
            cost = self._costs[key] = RunCost()
        return key, cost

    def _observe(self, tracked: _Tracked, seconds: float, inline: bool) -> None:
        key, cost = tracked
        was_inline = cost.inline
        if was_inline and not inline:  # handed to a thread before its class moved onto the loop: not a measure now
            return
        observe(cost, seconds, inline, self._inline_limit_s)
        if cost.inline != was_inline:
            _log_move(key, cost, self._inline_limit_s)

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
        answer: bytes | ModelStream
        if isinstance(out, bytes):
            answer = out
            if self._capture is not None:
                self._capture.offer_bytes(
                    req.model, lease.version, raw.content_type, raw.body, ctype, out, req.id or None
                )
        else:  # the model streams: pieces pulled on its thread, the version held loaded till the stream ends
            answer = ModelStream(out, self._threads.submit, req.model, lease.version)
            lease.hold(answer.done)
        return InferenceResponse(
            model=req.model,
            version=lease.version,
            signature="",
            outputs={},
            timings=Timings(0.0, now - t0, now - started),
            id=req.id,
            raw=(answer, ctype),
        )
