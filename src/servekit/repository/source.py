"""Polls storage for each configured model and tells a target which versions it should serve."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol

from servekit.config.models import ModelConfig
from servekit.errors import ConfigError
from servekit.repository.layout import VersionLister
from servekit.repository.version_policy import aspired_versions
from servekit.storage import Storage

log = logging.getLogger(__name__)


class AspiredVersionsTarget(Protocol):
    """Receives the complete set of versions a model should serve; versions left out are to be unloaded."""

    def set_models(self, models: Sequence[ModelConfig]) -> None: ...

    def set_aspired_versions(self, model: str, versions: Mapping[int, str]) -> None: ...


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

    def scan(self) -> dict[str, dict[int, str]]:
        """Each model's aspired versions as found on storage now (blocking I/O: run it in a thread)."""
        found: dict[str, dict[int, str]] = {}
        for model in self._models:
            try:
                on_disk = self._lister.versions(model.base_path)
            except OSError as exc:
                log.warning("cannot list %s for model %s: %s", model.base_path, model.name, exc)
                continue
            wanted = aspired_versions(model.version_policy, on_disk)
            found[model.name] = {v: on_disk[v] for v in sorted(wanted)}
        return found

    def announce(self, scanned: Mapping[str, Mapping[int, str]]) -> None:
        for name, versions in scanned.items():
            self._target.set_aspired_versions(name, versions)

    def poll_once(self) -> None:
        self.announce(self.scan())

    async def poll(self) -> None:
        self.announce(await asyncio.to_thread(self.scan))

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
