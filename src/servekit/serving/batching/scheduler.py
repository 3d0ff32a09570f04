"""One batch queue per (model, version, signature), created on first use, closed when the version goes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy.typing as npt

from servekit._utils.threads import ModelThreads
from servekit.config.models import BatchingConfig
from servekit.serving.batching.queue import BatchObserver, BatchQueue
from servekit.serving.runtime.base import Servable
from servekit.serving.runtime.devices import batching_for_device
from servekit.types import Signature


def batchable(sig: Signature) -> bool:
    """Rows of different requests can be stacked only when every input has a free batch dimension."""
    return sig.validate and bool(sig.inputs) and all(t.shape and t.shape[0] < 0 for t in sig.inputs)


class BatchScheduler:
    def __init__(
        self,
        threads: ModelThreads,
        batching_for: Callable[[str], BatchingConfig | None],
        observer: BatchObserver | None = None,
    ) -> None:
        self._threads = threads
        self._batching_for = batching_for
        self._observer = observer
        self._queues: dict[tuple[str, int, str], tuple[Servable, BatchQueue | None]] = {}

    def queue_for(self, model: str, version: int, servable: Servable, sig: Signature) -> BatchQueue | None:
        key = (model, version, sig.name)
        entry = self._queues.get(key)
        if entry is not None and entry[0] is servable:
            return entry[1]
        cfg = self._batching_for(model)
        if cfg is not None:  # a model on a GPU gets TF Serving's GPU batching unless its parameters were given
            cfg = batching_for_device(cfg, str(getattr(servable, "device", "cpu")))
        if cfg is None or not batchable(sig):
            self._queues[key] = (servable, None)  # remembered: unbatched requests skip this lookup next time
            return None
        name = sig.name

        def predict(inputs: dict[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
            return servable.predict(name, inputs)

        # One thread-pool hop per batch; the event loop never runs model code.
        queue = BatchQueue(predict, cfg, threads=self._threads, key=(model, str(version)), observer=self._observer)
        self._queues[key] = (servable, queue)
        return queue

    async def drop(self, model: str, version: int) -> None:
        for key in [k for k in self._queues if k[0] == model and k[1] == version]:
            _, queue = self._queues.pop(key)
            if queue is not None:
                await queue.close()

    async def close(self) -> None:
        for _, queue in list(self._queues.values()):
            if queue is not None:
                await queue.close()
        self._queues.clear()
