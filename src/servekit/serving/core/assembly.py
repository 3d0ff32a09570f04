"""The serving core: storage, runtimes, manager, threads, batching, capture, metrics and polling, wired for one
server process. It knows no HTTP: the REST app and any other front (gRPC) mount adapters on the same core.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from servekit._utils.threads import ModelThreads
from servekit.config.loading import load_model_config_file
from servekit.config.models import BatchingConfig, ModelConfig, ServerConfig
from servekit.serving.batching.scheduler import BatchScheduler
from servekit.serving.capture.sink import CaptureWriter
from servekit.serving.core.admission import Admission
from servekit.serving.core.manager import ModelManager
from servekit.serving.core.service import InferenceService
from servekit.serving.core.warmup import run_warmup
from servekit.serving.lifecycle import ServableState
from servekit.serving.metrics import Metrics
from servekit.serving.repository.layout import parse_version
from servekit.serving.repository.source import RepositorySource
from servekit.serving.runtime.base import Servable
from servekit.serving.runtime.registry import RuntimeRegistry
from servekit.storage import Storage

log = logging.getLogger(__name__)


class ServingCore:
    """Storage, runtimes, manager, source and inference service wired together for one server."""

    def __init__(self, config: ServerConfig, registry: RuntimeRegistry | None = None) -> None:
        self.config = config
        self.storage = Storage()
        self.registry = registry or RuntimeRegistry()
        self.metrics = Metrics(config.metrics_multiprocess_dir)
        self.manager = ModelManager(
            self._load,
            max_load_retries=config.max_num_load_retries,
            retry_interval=config.load_retry_interval_seconds,
            observer=self,
            before_unload=self._drain_batches,
        )
        self.threads = ModelThreads(config.num_inference_threads, name="servekit-infer")
        self.batching = BatchScheduler(self.threads, self._batching_for, observer=self.metrics)
        self.capture = CaptureWriter(config.capture) if config.capture and config.capture.enabled else None
        if self.capture is not None:
            self.metrics.watch_capture(self.capture)
        self.service = InferenceService(
            self.manager,
            self.threads,
            self.batching,
            observer=self.metrics,
            capture=self.capture,
            admission=Admission(self.threads, config.num_inference_threads, config.max_queued_requests),
            inline_limit_s=config.inline_run_limit_micros / 1e6,
        )
        self._background: set[asyncio.Task[None]] = set()
        self._state_listeners: list[Callable[[str, int, ServableState], None]] = []
        self._ready: asyncio.Event | None = None
        self._settle_waiters: set[asyncio.Event] = set()  # reload_models calls waiting for the manager to settle
        config_file = config.model_config_file
        self.source = RepositorySource(
            self.storage,
            self.manager,
            config.models,
            poll_wait=config.file_system_poll_wait_seconds,
            config_loader=(lambda: load_model_config_file(config_file)) if config_file else None,
            config_poll_wait=config.model_config_file_poll_wait_seconds,
        )

    async def _drain_batches(self, model: str, version: int) -> None:
        await self.batching.drop(model, version)

    def _batching_for(self, model: str) -> BatchingConfig | None:
        return self.manager.config(model).batching or self.config.batching

    def _load(self, path: str, model: ModelConfig) -> Servable:
        """Runs on the manager's load thread: load, then warm up before the version is marked AVAILABLE."""
        local = Path(self.storage.local_path(path))
        version = parse_version(path.rstrip("/").rsplit("/", 1)[-1]) or 0
        servable = self.registry.load(local, model.platform, self.config.runtime)
        if self.config.enable_model_warmup:
            try:
                run_warmup(servable, local, model.name, self.config.num_request_iterations_for_warmup, version)
            except Exception:
                servable.unload()
                raise
        return servable

    def add_state_listener(self, listener: Callable[[str, int, ServableState], None]) -> None:
        """Also tell ``listener`` each servable state change (e.g. a multi-model host waiting for a load)."""
        self._state_listeners.append(listener)

    # LifecycleObserver: metrics, and batch queues closed with their version.
    def on_state(self, model: str, version: int, state: ServableState) -> None:
        self.metrics.on_state(model, version, state)
        for listener in self._state_listeners:
            listener(model, version, state)
        self._check_settled()
        if state in (ServableState.END, ServableState.ERROR):
            task = asyncio.get_running_loop().create_task(self.batching.drop(model, version))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    def on_load(self, model: str, version: int, seconds: float, ok: bool) -> None:
        self.metrics.on_load(model, version, seconds, ok)
        self._check_settled()

    def _check_settled(self) -> None:
        if self._ready is not None and not self._ready.is_set() and self.manager.settled():
            self._ready.set()
        if self._settle_waiters and self.manager.settled():
            for event in self._settle_waiters:
                event.set()

    async def reload_models(self, models: tuple[ModelConfig, ...]) -> None:
        """Serve exactly ``models`` from now on (TF Serving's HandleReloadConfigRequest, the same path as a changed
        config file): new models are loaded and this returns once each has a version available or has finished
        its first load attempt; models left out are unloaded."""
        await self.source.replace_models(models)  # the config file's reload path, given the list instead of a file
        if self.manager.settled():
            return
        event = asyncio.Event()
        self._settle_waiters.add(event)
        try:
            await event.wait()
        finally:
            self._settle_waiters.discard(event)

    async def start(self) -> None:
        """Start polling; with ``wait_for_models_seconds`` also hold startup (so the server does not accept
        connections yet) until every model has a version available or has finished its first load attempt
        (a model that cannot load must not keep the others from serving), or that long has passed."""
        self._ready = asyncio.Event()
        if self.capture is not None:
            self.capture.start()
        await self.source.start()
        wait = self.config.wait_for_models_seconds
        if wait > 0 and not self.manager.settled():
            try:
                await asyncio.wait_for(self._ready.wait(), wait)
            except TimeoutError:
                log.warning("models not all available after %.0fs; serving anyway", wait)

    async def stop(self) -> None:
        await self.source.stop()
        await self.manager.close()
        await self.batching.close()
        if self.capture is not None:
            await asyncio.to_thread(self.capture.close)
        self.threads.shutdown()
