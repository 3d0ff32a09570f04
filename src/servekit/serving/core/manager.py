"""The model manager: turns aspired versions into loaded servables without ever dropping a request.

Availability-preserving policy (TF Serving's default): a new version is loaded fully before the version it
replaces is unloaded, and unloading waits until every request holding a lease on the old version is done.
A version that fails to load is retried, then parked in ERROR; it never displaces a working version. Once the
source reports that a failed version's files changed (a new fingerprint), it ends and is loaded afresh.

All bookkeeping runs on the event loop thread; only ``load`` and ``unload`` of a runtime run in worker
threads, so serving never waits on a load.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from servekit.config.models import ModelConfig
from servekit.errors import ErrorCode, ServekitError, not_found, unavailable
from servekit.serving.lifecycle import ServableState, check_transition
from servekit.serving.runtime.base import Servable

log = logging.getLogger(__name__)

Loader = Callable[[str, ModelConfig], Servable]  # (version path, model config) -> servable; blocking


_ABSOLUTE_PATH = re.compile(r"(?<![\w.:/>])(?:/[^\s/'\":,;()]+){2,}")


def relative_paths(text: str, model: str, base_path: str) -> str:
    """``text`` with the model's base path shown as ``<model>`` and any other absolute path cut to its last part,
    so what a client reads about a load failure names the file without the server's directory layout."""
    base = base_path.removeprefix("file://").rstrip("/")
    if base:
        text = text.replace(base, f"<{model}>")
    return _ABSOLUTE_PATH.sub(lambda m: ".../" + m.group(0).rsplit("/", 1)[-1], text)


class LifecycleObserver(Protocol):
    """Port for metrics: told about every state change and how long each load took."""

    def on_state(self, model: str, version: int, state: ServableState) -> None: ...

    def on_load(self, model: str, version: int, seconds: float, ok: bool) -> None: ...


@dataclass(eq=False)
class VersionHarness:
    """One version's lifecycle; enforces the state machine and counts leases."""

    model: str
    version: int
    path: str
    state: ServableState = ServableState.NEW
    error: str = ""
    servable: Servable | None = None
    leases: int = 0
    attempts: int = 0
    fingerprint: str | None = None  # of the files the latest load attempt read (as last reported before it)
    drained: asyncio.Event = field(default_factory=asyncio.Event)

    def move(self, new: ServableState) -> None:
        check_transition(self.state, new)
        self.state = new


@dataclass(frozen=True, slots=True)
class VersionStatus:
    version: int
    state: ServableState
    error: str = ""


class Lease:
    """A held version; a plain class context manager because it is taken on every request."""

    __slots__ = ("_harness", "model", "servable", "version")

    def __init__(self, model: str, version: int, servable: Servable, harness: VersionHarness) -> None:
        self.model = model
        self.version = version
        self.servable = servable
        self._harness = harness

    def __enter__(self) -> Lease:
        self._harness.leases += 1
        return self

    def __exit__(self, *exc: object) -> None:
        h = self._harness
        h.leases -= 1
        if h.leases == 0 and h.state is ServableState.UNLOADING:
            h.drained.set()

    def hold(self, work: asyncio.Future[Any]) -> None:
        """Keep the version loaded until ``work`` (a model call on another thread) is done, even if the request
        that started it is cancelled and leaves its ``with`` block first."""
        self._harness.leases += 1
        work.add_done_callback(lambda _: self.__exit__())


@dataclass(eq=False)
class _Model:
    config: ModelConfig
    aspired: dict[int, str] = field(default_factory=dict)
    fingerprints: dict[int, str] = field(default_factory=dict)  # latest reported, of versions not loaded
    versions: dict[int, VersionHarness] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None
    dirty: bool = False
    scanned: bool = False  # the source has reported at least once
    removed: bool = False  # left the config; dropped once every version has ended
    available: tuple[int, ...] = ()  # sorted; refreshed on every state change (read on each request)


class ModelManager:
    def __init__(
        self,
        loader: Loader,
        *,
        max_load_retries: int = 5,
        retry_interval: float = 60.0,
        observer: LifecycleObserver | None = None,
        num_load_threads: int = 1,
        before_unload: Callable[[str, int], Awaitable[None]] | None = None,
    ) -> None:
        self._loader = loader
        self._max_retries = max_load_retries
        self._retry_interval = retry_interval
        self._observer = observer
        # Awaited after a version's leases drain and before its servable unloads: work that outlives a
        # lease (a cancelled request's batch still on a model thread) finishes first.
        self._before_unload = before_unload
        self._models: dict[str, _Model] = {}
        self._closing = False
        self._closed_event: asyncio.Event | None = None
        # Loads are serial by default (TF Serving's num_load_threads=0): unpickling in two threads at once can
        # deadlock on the import lock, and one load at a time keeps CPU for serving.
        self._load_pool = ThreadPoolExecutor(max(1, num_load_threads), thread_name_prefix="servekit-load")

    # ---- what the source tells us -------------------------------------------------------------------
    def set_models(self, models: Sequence[ModelConfig]) -> None:
        wanted = {m.name: m for m in models}
        for name in list(self._models):
            if name not in wanted:
                log.info("model %s left the config; unloading its versions", name)
                entry = self._models[name]
                entry.removed = True
                entry.aspired = {}
                self._kick(entry)  # always: a model with nothing loaded must still be dropped
        for name, cfg in wanted.items():
            if name in self._models:
                self._models[name].config = cfg
                self._models[name].removed = False
            else:
                self._models[name] = _Model(cfg)

    def set_aspired_versions(
        self, model: str, versions: Mapping[int, str], fingerprints: Mapping[int, str] | None = None
    ) -> None:
        entry = self._models.get(model)
        if entry is None or entry.removed:  # a scan that started before the model left the config
            return
        entry.scanned = True
        if fingerprints is not None:
            entry.fingerprints = dict(fingerprints)
        if dict(versions) == entry.aspired and not self._needs_work(entry):
            return
        entry.aspired = dict(versions)
        self._kick(entry)

    def loaded_versions(self, model: str) -> Collection[int]:
        entry = self._models.get(model)
        return entry.available if entry is not None else ()

    @staticmethod
    def _changed_since_failure(entry: _Model, h: VersionHarness) -> bool:
        """A failed version whose files changed after its last load attempt read them: worth another try."""
        if h.state is not ServableState.ERROR or h.version not in entry.aspired:
            return False
        now = entry.fingerprints.get(h.version)
        return now is not None and now != h.fingerprint

    def _needs_work(self, entry: _Model) -> bool:
        for v in entry.aspired:
            h = entry.versions.get(v)
            if h is None or h.state is ServableState.NEW or self._changed_since_failure(entry, h):
                return True
        # A version that left the aspired set is work only once it can go: a replacement is up, or none is wanted.
        can_unload = not entry.aspired or any(
            entry.versions[v].state is ServableState.AVAILABLE for v in entry.aspired if v in entry.versions
        )
        return can_unload and any(
            h.state is ServableState.AVAILABLE and h.version not in entry.aspired for h in entry.versions.values()
        )

    def _kick(self, entry: _Model) -> None:
        if self._closing:
            return
        if entry.task is not None and not entry.task.done():
            entry.dirty = True
            return
        entry.task = asyncio.get_running_loop().create_task(self._reconcile(entry))

    # ---- reconciliation ------------------------------------------------------------------------------
    async def _reconcile(self, entry: _Model) -> None:
        while True:
            entry.dirty = False
            try:
                await self._step(entry)
            except Exception:  # keep reconciling other work; the error is in the harness or the log
                log.exception("reconciling model %s failed", entry.config.name)
            if not entry.dirty or self._closing:
                break
        if entry.removed and all(h.state is ServableState.END for h in entry.versions.values()):
            if self._models.get(entry.config.name) is entry:
                del self._models[entry.config.name]

    async def _step(self, entry: _Model) -> None:
        name = entry.config.name
        for version, path in entry.aspired.items():
            h = entry.versions.get(version)
            if h is not None and self._changed_since_failure(entry, h):
                log.info("model %s version %d changed on disk since it failed to load; loading it again", name, version)
                self._set_state(h, ServableState.END)  # the failed attempt ends; a fresh lifecycle begins
            if h is None or h.state is ServableState.END:
                entry.versions[version] = VersionHarness(name, version, path)
        # Load new versions, newest first, so "latest" moves forward as early as possible.
        for version in sorted(entry.aspired, reverse=True):
            h = entry.versions[version]
            if h.state is ServableState.NEW:
                await self._load(entry, h)
        # Drop versions that left the aspired set, but never the last working one while a replacement
        # is still missing (availability-preserving).
        aspired_ready = any(entry.versions[v].state is ServableState.AVAILABLE for v in entry.aspired)
        for h in list(entry.versions.values()):
            if h.version in entry.aspired:
                continue
            if h.state in (ServableState.NEW, ServableState.ERROR):
                self._set_state(h, ServableState.END)
            elif h.state is ServableState.AVAILABLE and (aspired_ready or not entry.aspired):
                await self._unload(h)

    async def _load(self, entry: _Model, h: VersionHarness) -> None:
        self._set_state(h, ServableState.LOADING)
        while True:
            h.attempts += 1
            h.fingerprint = entry.fingerprints.get(h.version)
            started = time.perf_counter()
            try:
                servable = await asyncio.get_running_loop().run_in_executor(
                    self._load_pool, self._loader, h.path, entry.config
                )
            except Exception as exc:
                full = str(exc) or type(exc).__name__
                # Clients read h.error (status, 503s): files named relative to the model; the log has it all.
                h.error = relative_paths(full, h.model, entry.config.base_path)
                self._observe_load(h, time.perf_counter() - started, ok=False)
                log.warning(
                    "loading %s version %d failed (attempt %d of %d): %s",
                    h.model,
                    h.version,
                    h.attempts,
                    self._max_retries + 1,
                    full,
                )
                if h.attempts > self._max_retries or h.version not in entry.aspired or self._closing:
                    self._set_state(h, ServableState.ERROR)
                    return
                await self._backoff()
                if h.version not in entry.aspired or self._closing:
                    self._set_state(h, ServableState.ERROR)
                    return
                continue
            self._observe_load(h, time.perf_counter() - started, ok=True)
            h.servable = servable
            h.error = ""
            self._set_state(h, ServableState.AVAILABLE)
            log.info("model %s version %d is AVAILABLE (%.3fs)", h.model, h.version, time.perf_counter() - started)
            return

    async def _unload(self, h: VersionHarness) -> None:
        self._set_state(h, ServableState.UNLOADING)
        if h.leases:
            h.drained.clear()
            await h.drained.wait()
        if self._before_unload is not None:
            await self._before_unload(h.model, h.version)
        servable, h.servable = h.servable, None
        if servable is not None:
            await asyncio.get_running_loop().run_in_executor(self._load_pool, servable.unload)
        self._set_state(h, ServableState.END)
        log.info("model %s version %d unloaded", h.model, h.version)

    def _set_state(self, h: VersionHarness, state: ServableState) -> None:
        h.move(state)
        entry = self._models.get(h.model)
        if entry is not None:
            entry.available = tuple(sorted(v for v, x in entry.versions.items() if x.state is ServableState.AVAILABLE))
        if self._observer is not None:
            self._observer.on_state(h.model, h.version, state)

    def _observe_load(self, h: VersionHarness, seconds: float, ok: bool) -> None:
        if self._observer is not None:
            self._observer.on_load(h.model, h.version, seconds, ok)

    async def wait_idle(self) -> None:
        """Wait until no model has reconciliation work in flight (tests and startup)."""
        while True:
            tasks = [m.task for m in self._models.values() if m.task is not None and not m.task.done()]
            if not tasks:
                return
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _backoff(self) -> None:
        """Wait out the retry interval, or less if the manager is closing (shutdown must not wait 60 s)."""
        if self._closed_event is None:
            self._closed_event = asyncio.Event()
        try:
            await asyncio.wait_for(self._closed_event.wait(), self._retry_interval)
        except TimeoutError:
            pass

    def settled(self) -> bool:
        """Every model was scanned and each aspired version is available or has finished a load attempt."""
        for entry in self._models.values():
            if not entry.scanned:
                return False
            if entry.available:
                continue
            for v in entry.aspired:
                h = entry.versions.get(v)
                if h is None or h.state is ServableState.NEW:
                    return False
                if h.state is ServableState.LOADING and not h.error:
                    return False
        return True

    async def close(self) -> None:
        """Stop reconciling and unload everything (leases still held are waited for)."""
        self._closing = True
        if self._closed_event is None:
            self._closed_event = asyncio.Event()
        self._closed_event.set()
        await self.wait_idle()
        for entry in self._models.values():
            for h in entry.versions.values():
                if h.state is ServableState.AVAILABLE:
                    await self._unload(h)
        self._load_pool.shutdown(wait=False)

    # ---- what requests use ---------------------------------------------------------------------------
    @property
    def model_names(self) -> list[str]:
        return sorted(self._models)

    def has_model(self, model: str) -> bool:
        return model in self._models

    def config(self, model: str) -> ModelConfig:
        return self._entry(model).config

    def _entry(self, model: str) -> _Model:
        entry = self._models.get(model)
        if entry is None:
            known = ", ".join(sorted(self._models)) or "none"
            raise not_found(f"model '{model}' is not served here; models: {known}", model=model)
        return entry

    def status(self, model: str) -> list[VersionStatus]:
        entry = self._entry(model)
        return [VersionStatus(h.version, h.state, h.error) for _, h in sorted(entry.versions.items())]

    def available_versions(self, model: str) -> list[int]:
        return list(self._entry(model).available)

    def is_ready(self, model: str, version: int | None = None) -> bool:
        try:
            available = self.available_versions(model)
        except ServekitError:
            return False
        return bool(available) if version is None else version in available

    def all_ready(self) -> bool:
        """Every configured model has an available version (and there is at least one model)."""
        return bool(self._models) and all(self.available_versions(m) for m in self._models)

    def resolve(self, model: str, version: int | None = None, label: str | None = None) -> int:
        """The version a request for (model, version|label|latest) should use; raises a clear error."""
        entry = self._models.get(model)
        if entry is None:
            entry = self._entry(model)  # raises the not-found error
        available = entry.available
        if version is None and label is None and available:
            return available[-1]  # the hot path: latest
        listing = ", ".join(map(str, available)) or "none"
        if label is not None:
            labels = entry.config.version_labels
            if label not in labels:
                known = ", ".join(sorted(labels)) or "none"
                raise not_found(f"model '{model}' has no version label '{label}'; labels: {known}")
            version = labels[label]
            if version not in available:
                raise not_found(
                    f"label '{label}' of model '{model}' points at version {version}, which is "
                    f"not available; available versions: {listing}"
                )
            return version
        if version is not None:
            if version in available:
                return version
            h = entry.versions.get(version)
            if h is not None and h.state in (ServableState.NEW, ServableState.LOADING):
                raise unavailable(
                    f"version {version} of model '{model}' is still loading; available versions: {listing}"
                )
            if h is not None and h.state is ServableState.ERROR:
                raise not_found(
                    f"version {version} of model '{model}' failed to load ({h.error}); available versions: {listing}"
                )
            raise not_found(f"model '{model}' has no version {version}; available versions: {listing}")
        if available:
            return available[-1]
        loading = [v for v, h in entry.versions.items() if h.state in (ServableState.NEW, ServableState.LOADING)]
        if loading or not entry.scanned:
            # a version between load retries says why its last attempt failed: the fix is often the caller's
            why = "".join(
                f"; version {v}'s last attempt failed: {entry.versions[v].error}"
                for v in sorted(loading)
                if entry.versions[v].error
            )
            raise unavailable(
                f"model '{model}' is not loaded yet (loading versions: "
                f"{', '.join(map(str, sorted(loading))) or 'pending scan'}){why}"
            )
        errors = [
            f"version {v}: {h.error}" for v, h in sorted(entry.versions.items()) if h.state is ServableState.ERROR
        ]
        if errors:
            raise unavailable(f"model '{model}' has no available version; " + "; ".join(errors))
        raise unavailable(f"model '{model}' has no version directories (<base_path>/<integer version>/) yet")

    def lease(self, model: str, version: int | None = None, label: str | None = None) -> Lease:
        """Hold a version for the length of a request (``with manager.lease(...) as lease``); its unload
        waits until every lease is released."""
        v = self.resolve(model, version, label)
        h = self._models[model].versions[v]
        if h.servable is None:  # cannot happen while AVAILABLE; guard the invariant loudly
            raise ServekitError(ErrorCode.INTERNAL, f"model '{model}' version {v} has no servable")
        return Lease(model, v, h.servable, h)
