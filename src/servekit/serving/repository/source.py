"""Polls storage for each configured model and tells a target which versions it should serve."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from servekit.config.models import ModelConfig
from servekit.errors import ConfigError
from servekit.serving.repository.layout import VersionLister
from servekit.serving.repository.version_policy import aspired_versions
from servekit.storage import Storage

log = logging.getLogger(__name__)


class AspiredVersionsTarget(Protocol):
    """Receives the complete set of versions a model should serve; versions left out are to be unloaded.

    ``fingerprints`` holds, for versions not yet loaded, a digest of their files (names, sizes, change stamps),
    so a version that failed to load can be tried again once its files change, and only then."""

    def set_models(self, models: Sequence[ModelConfig]) -> None: ...

    def set_aspired_versions(
        self, model: str, versions: Mapping[int, str], fingerprints: Mapping[int, str] | None = None
    ) -> None: ...

    def loaded_versions(self, model: str) -> Collection[int]:
        """Versions already serving: the source does not fingerprint them (their files are not read again)."""
        ...


@dataclass(frozen=True, slots=True)
class ScannedModel:
    versions: dict[int, str]  # aspired version -> its directory
    fingerprints: dict[int, str] = field(default_factory=dict)  # of the versions not loaded yet


def fingerprint(storage: Storage, path: str) -> str:
    """A digest of a version directory's file names, sizes and change stamps; a directory that cannot be
    listed gets a digest of why, so it changes once the directory can be read."""
    digest = hashlib.sha256()
    try:
        for entry in storage.list(path, recursive=True):
            digest.update(f"{entry.key}\0{entry.size}\0{entry.stamp}\n".encode(errors="surrogateescape"))
    except Exception as exc:  # any listing failure is a state of the directory, not of the poll
        digest.update(f"unlistable: {type(exc).__name__} {getattr(exc, 'errno', '')}".encode())
    return digest.hexdigest()[:32]


class RepositorySource:
    """TF Serving's file-system storage path source.

    ``poll_wait`` > 0 polls that often, 0 polls once at start, < 0 never polls (TF Serving's meaning).
    ``config_loader`` (when the models come from a file) is re-run every ``config_poll_wait`` seconds
    (0 = read once); a model missing from a new config is unloaded.
    """

    def __init__(
        self,
        storage: Storage,
        target: AspiredVersionsTarget,
        models: Sequence[ModelConfig],
        *,
        poll_wait: float = 1.0,
        config_loader: Callable[[], Sequence[ModelConfig]] | None = None,
        config_poll_wait: float = 0.0,
    ) -> None:
        self._storage = storage
        self._lister = VersionLister(storage)
        self._target = target
        self._models = tuple(models)
        self._poll_wait = poll_wait
        self._config_loader = config_loader
        self._config_poll_wait = config_poll_wait
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def models(self) -> tuple[ModelConfig, ...]:
        return self._models

    def _loaded(self) -> dict[str, frozenset[int]]:
        """What the target already serves (asked on the event loop, before the scan goes to a thread)."""
        return {m.name: frozenset(self._target.loaded_versions(m.name)) for m in self._models}

    def scan(self, loaded: Mapping[str, Collection[int]] | None = None) -> dict[str, ScannedModel]:
        """Each model's aspired versions as found on storage now, with the fingerprints of those not in
        ``loaded`` (blocking I/O: run it in a thread)."""
        found: dict[str, ScannedModel] = {}
        for model in self._models:
            try:
                on_disk = self._lister.versions(model.base_path)
            except OSError as exc:
                log.warning("cannot list %s for model %s: %s", model.base_path, model.name, exc)
                continue
            wanted = aspired_versions(model.version_policy, on_disk)
            versions = {v: on_disk[v] for v in sorted(wanted)}
            skip = (loaded or {}).get(model.name, ())
            prints = {v: fingerprint(self._storage, path) for v, path in versions.items() if v not in skip}
            found[model.name] = ScannedModel(versions, prints)
        return found

    def announce(self, scanned: Mapping[str, ScannedModel]) -> None:
        for name, model in scanned.items():
            self._target.set_aspired_versions(name, model.versions, model.fingerprints)

    def poll_once(self) -> None:
        self.announce(self.scan(self._loaded()))

    async def poll(self) -> None:
        self.announce(await asyncio.to_thread(self.scan, self._loaded()))

    def _read_config(self) -> tuple[ModelConfig, ...] | None:
        if self._config_loader is None:
            return None
        try:
            return tuple(self._config_loader())
        except ConfigError as exc:
            log.error("keeping the current models: %s", exc)
            return None

    def _apply_config(self, models: tuple[ModelConfig, ...] | None) -> bool:
        if models is None or models == self._models:
            return False
        self._models = models
        self._target.set_models(models)
        return True

    async def replace_models(self, models: Sequence[ModelConfig]) -> None:
        """Serve exactly ``models`` from now on (models left out unload) and scan for their versions at once."""
        if self._apply_config(tuple(models)):
            await self.poll()

    async def start(self) -> None:
        self._target.set_models(self._models)
        if self._poll_wait >= 0:
            await self.poll()
        if self._poll_wait > 0:
            self._tasks.append(asyncio.create_task(self._every(self._poll_wait, self.poll)))
        if self._config_loader is not None and self._config_poll_wait > 0:
            self._tasks.append(asyncio.create_task(self._every(self._config_poll_wait, self._config_tick)))

    async def _config_tick(self) -> None:
        if self._apply_config(await asyncio.to_thread(self._read_config)):
            await self.poll()

    async def _every(self, seconds: float, fn: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                await fn()
            except Exception:  # a bad poll must not end polling; the next tick retries
                log.exception("repository poll failed")

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass
        self._tasks.clear()
