"""Multi-model hosting inside one serving process: SageMaker's multi-model container contract, without HTTP.

A :class:`MultiModelHost` loads models on request (``load``: a name and a model directory), unloads them
(``unload``), lists them, and keeps the process within a memory budget by **unloading the least recently used
models that have no request in flight** before (and if needed after) a load. A model's footprint is measured: the
process's resident memory after its load minus before (loads are serial on the manager's load thread, so the
difference is that model's), never less than its size on disk. A model that cannot fit even alone is refused with
:class:`InsufficientMemory` (SageMaker's 507), not left to an out-of-memory kill.

The host drives the ordinary model manager through the repository source (one model config per loaded model), so
a loaded model is served, batched, measured and captured like any other, and ``/invocations`` with
``tfs-model-name`` reaches it too.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from servekit._utils import heap
from servekit.config.models import ModelConfig
from servekit.errors import ConfigError, ErrorCode, ServekitError, invalid, not_found
from servekit.serving.core.assembly import ServingCore
from servekit.serving.lifecycle import ServableState

log = logging.getLogger(__name__)


class AlreadyLoaded(ServekitError):
    """SageMaker's 409: the model name is loaded already."""

    def __init__(self, name: str) -> None:
        super().__init__(ErrorCode.INVALID_ARGUMENT, f"model {name} is already loaded")


class InsufficientMemory(ServekitError):
    """SageMaker's 507: the model does not fit in the instance's memory even with every idle model unloaded."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.UNAVAILABLE, message)


class LoadFailed(ServekitError):
    """The model's files did not load (the message names the model and says why); the instance serves on."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.MODEL_ERROR, message)


def process_rss_bytes() -> int:
    """This process's resident memory (Linux ``/proc/self/statm``; 0 where it cannot be read)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


def disk_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path, followlinks=True):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


@dataclass(slots=True)
class Hosted:
    name: str
    url: str
    footprint_bytes: int = 0
    loaded_at: float = 0.0
    last_used: float = 0.0
    in_flight: int = 0
    load_s: float = 0.0
    pinned: bool = False  # preloaded for the endpoint's lifetime: never unloaded to make room


@dataclass(frozen=True, slots=True)
class LoadReport:
    name: str
    load_s: float
    footprint_bytes: int
    evicted: tuple[str, ...] = field(default_factory=tuple)
    unload_s: tuple[float, ...] = field(default_factory=tuple)  # per evicted model, how long its unload took


class MultiModelHost:
    def __init__(
        self,
        core: ServingCore,
        memory_limit_bytes: int | None = None,
        rss: Callable[[], int] = process_rss_bytes,
        clock: Callable[[], float] = time.monotonic,
        load_timeout_s: float = 360.0,
    ) -> None:
        """``memory_limit_bytes``: the resident memory the process may reach with its models (None: no limit)."""
        self._core = core
        self.memory_limit_bytes = memory_limit_bytes
        self._rss = rss
        self._clock = clock
        self._load_timeout_s = load_timeout_s
        self.models: dict[str, Hosted] = {}
        self._loading: dict[str, asyncio.Future[LoadReport]] = {}
        self._lock = asyncio.Lock()  # one load or unload at a time: footprints are measured as differences
        self._changed = asyncio.Event()
        self.unloads = 0
        self._links: Path | None = None  # version-1 links for flat model directories
        self._footprints: dict[str, int] = {}  # model directory -> resident bytes it took when last loaded
        self._baseline = rss()  # the server's own memory, before any model
        core.add_state_listener(self._on_state)

    def _on_state(self, model: str, version: int, state: ServableState) -> None:
        self._changed.set()

    # ---- the container API --------------------------------------------------------------------------------
    def listing(self) -> list[Hosted]:
        return [self.models[n] for n in sorted(self.models)]

    def get(self, name: str) -> Hosted:
        found = self.models.get(name)
        if found is None:
            raise not_found(f"model {name} is not loaded", model=name)
        return found

    async def load(self, name: str, url: str, pinned: bool = False) -> LoadReport:
        """Load ``url`` (a servekit model directory) as ``name``, unloading idle models first if the budget needs
        it. Concurrent loads of one name share the first one's outcome; a loaded name is :class:`AlreadyLoaded`."""
        pending = self._loading.get(name)
        if pending is not None:  # before the loaded check: a load under way has its entry already
            return await asyncio.shield(pending)
        if name in self.models:
            raise AlreadyLoaded(name)
        future: asyncio.Future[LoadReport] = asyncio.get_running_loop().create_future()
        self._loading[name] = future
        try:
            report = await self._load(name, url, pinned)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: a load nobody else waited for must not warn
            raise
        finally:
            self._loading.pop(name, None)
        future.set_result(report)
        return report

    async def _load(self, name: str, url: str, pinned: bool) -> LoadReport:
        try:
            ModelConfig(name=name, base_path=url)  # the name's rules, before anything is touched
        except ConfigError as exc:
            raise invalid(str(exc)) from None
        if not Path(url).is_dir():
            raise not_found(f"model data for {name} not found at {url}", model=name)
        url = self._versioned(name, url)
        async with self._lock:
            # what this model took last time it was loaded here, else its size on disk
            estimate = max(disk_bytes(url), self._footprints.get(url, 0), 1)
            evicted = list(self._make_room(estimate))
            unload_s = [await self._unload(gone) for gone in evicted]
            before = self._rss()
            began = self._clock()
            self.models[name] = Hosted(name, url, estimate, began, began, pinned=pinned)
            await self._set_models()
            error = await self._wait_loaded(name)
            if error is not None:
                del self.models[name]
                await self._set_models()
                raise LoadFailed(f"model {name} failed to load: {error}")
            hosted = self.models[name]
            hosted.load_s = self._clock() - began
            hosted.footprint_bytes = max(self._rss() - before, disk_bytes(url), 1)
            self._footprints[url] = hosted.footprint_bytes
            limit = self.memory_limit_bytes
            if limit is not None and self._rss() > limit:
                more = [m for m in self._idle_lru() if m != name]
                while more and self._rss() > limit:
                    gone = more.pop(0)
                    evicted.append(gone)
                    unload_s.append(await self._unload(gone))
                if hosted.footprint_bytes > limit - self._baseline:
                    footprint = hosted.footprint_bytes
                    await self._unload(name)
                    raise InsufficientMemory(
                        f"model {name} needs about {footprint / 2**20:.0f} MiB and does not fit in the instance's "
                        f"{limit / 2**20:.0f} MiB beside the server's own {self._baseline / 2**20:.0f} MiB"
                    )
                if self._rss() > limit:  # the rest is held by requests in flight: unloaded once they finish
                    log.warning(
                        "over the memory limit by %d MiB while models with requests in flight stay loaded",
                        (self._rss() - limit) // 2**20,
                    )
            log.info("loaded %s from %s in %.3f s (%d bytes)", name, url, hosted.load_s, hosted.footprint_bytes)
            return LoadReport(name, hosted.load_s, hosted.footprint_bytes, tuple(evicted), tuple(unload_s))

    def _versioned(self, name: str, url: str) -> str:
        """``url`` itself when it holds version directories (``1/``, ``2/``); else a base whose version 1 links to
        it, as SageMaker's containers get a model's files at the top of their directory."""
        entries = [e for e in Path(url).iterdir() if not e.name.startswith(".")]
        if entries and all(e.is_dir() and e.name.isdigit() for e in entries):
            return url
        if self._links is None:
            self._links = Path(tempfile.mkdtemp(prefix="servekit-mme-"))
        base = self._links / name
        base.mkdir(exist_ok=True)
        link = base / "1"
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(Path(url).resolve(), target_is_directory=True)
        return str(base)

    def _idle_lru(self) -> list[str]:
        """Loaded models with no request in flight and not pinned, least recently used first."""
        idle = [m for m in self.models.values() if m.in_flight == 0 and not m.pinned]
        return [m.name for m in sorted(idle, key=lambda m: m.last_used)]

    def _make_room(self, needed: int) -> Iterator[str]:
        """The idle models to unload so that ``needed`` more bytes stay within the limit (by their footprints)."""
        if self.memory_limit_bytes is None:
            return
        room = self.memory_limit_bytes - self._rss()
        for name in self._idle_lru():
            if room >= needed:
                return
            room += self.models[name].footprint_bytes
            yield name

    async def unload(self, name: str) -> float:
        """Unload ``name`` once its requests in flight have finished; the seconds it took."""
        self.get(name)
        async with self._lock:
            return await self._unload(name)

    async def _unload(self, name: str) -> float:
        began = self._clock()
        del self.models[name]
        await self._set_models()
        deadline = began + self._load_timeout_s
        while self._core.manager.has_model(name) and self._clock() < deadline:
            self._changed.clear()
            if not self._core.manager.has_model(name):
                break
            try:
                await asyncio.wait_for(self._changed.wait(), 1.0)
            except TimeoutError:
                pass
        self.unloads += 1
        # glibc keeps freed heap pages (and raises its mmap threshold after large frees, so the next model's arrays
        # come from the heap too): hand them back, or the next load's measure sees them as used.
        heap.trim()
        return self._clock() - began

    async def _set_models(self) -> None:
        await self._core.source.replace_models(
            [ModelConfig(name=m.name, base_path=m.url) for m in self.models.values()]
        )

    async def _wait_loaded(self, name: str) -> str | None:
        """None once a version of ``name`` is available; the load error if it failed for good."""
        deadline = self._clock() + self._load_timeout_s
        while True:
            self._changed.clear()
            statuses = self._core.manager.status(name) if self._core.manager.has_model(name) else []
            if any(s.state is ServableState.AVAILABLE for s in statuses):
                return None
            errors = [s.error for s in statuses if s.state in (ServableState.ERROR, ServableState.END) and s.error]
            if errors:
                return errors[0]
            if self._clock() > deadline:
                return f"not loaded within {self._load_timeout_s:.0f} s"
            try:
                await asyncio.wait_for(self._changed.wait(), 1.0)
            except TimeoutError:
                pass

    @contextmanager
    def using(self, name: str) -> Iterator[Hosted]:
        """Count a request in flight on ``name`` (it is never evicted meanwhile) and mark it used."""
        hosted = self.get(name)
        hosted.in_flight += 1
        hosted.last_used = self._clock()
        try:
            yield hosted
        finally:
            hosted.in_flight -= 1
            hosted.last_used = self._clock()
