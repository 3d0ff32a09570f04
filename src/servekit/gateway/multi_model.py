"""Multi-model endpoints at the gateway: which instance a ``TargetModel`` goes to, and loading it there once.

``TargetModel`` is a path under the model's ``ModelDataUrl`` prefix (``customer-17/model.tar.gz``), as in SageMaker.
The gateway resolves it to a local model directory (the artifact resolver: download, safe unpack, cache), names it
for the instance by a hash (the container's ``model_name`` is opaque, as SageMaker's is), and asks the instance to
load it (``POST /models``) the first time a request for it lands there; concurrent first requests wait on the same
load. What each instance holds is remembered from its answers (a load, the models it says it unloaded to make room,
a 404 from an instance that no longer has one), so a warm request costs no extra call.

Instance choice (:func:`servekit.gateway.routing.rendezvous`) keeps one model on the same instance while that
instance is not saturated, so caches stay warm; a saturated one spills the request to the next instance in that
model's order.
"""

from __future__ import annotations

import asyncio
import hashlib
import posixpath
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp

TARGET_HEADER = "X-Amzn-SageMaker-Target-Model"
MAX_TARGET = 1024


class TargetError(ValueError):
    """A TargetModel that cannot name a model under the prefix (the message says why)."""


def check_target(target: str) -> str:
    """The TargetModel, normalised; :class:`TargetError` for one that is empty, too long, absolute, or climbs out
    of the prefix with ``..`` (a hostile path must not reach the artifact store)."""
    if not target or len(target) > MAX_TARGET:
        raise TargetError(f"TargetModel must be 1 to {MAX_TARGET} characters.")
    if target.startswith("/") or "\\" in target or "\x00" in target:
        raise TargetError(f"TargetModel {target!r} must be a relative path under the model's ModelDataUrl.")
    parts = target.split("/")
    if any(p in ("..", ".") for p in parts):
        raise TargetError(f"TargetModel {target!r} must not contain '.' or '..' segments.")
    return posixpath.normpath(target)


def model_name(target: str) -> str:
    """The opaque name an instance knows a TargetModel by."""
    return "m" + hashlib.sha256(target.encode()).hexdigest()[:32]


def join(prefix: str, target: str) -> str:
    return prefix.rstrip("/") + "/" + target


@dataclass(frozen=True, slots=True)
class LoadOutcome:
    """How a request found its model: a cache hit, or what loading it cost (for CloudWatch's MME metrics)."""

    hit: bool
    wait_s: float = 0.0  # ModelLoadingWaitTime: what this request waited for download and load
    download_s: float = 0.0  # ModelDownloadingTime (resolving the artifact)
    load_s: float = 0.0  # ModelLoadingTime (the instance's load)
    unload_s: tuple[float, ...] = ()  # per model the instance unloaded to make room (ModelUnloadingTime)
    loaded_models: int = 0  # how many models the instance holds now (LoadedModelCount)


class LoadError(Exception):
    def __init__(self, code: str, status: int, message: str, original_status: int = 0) -> None:
        super().__init__(message)
        self.code, self.status, self.message, self.original_status = code, status, message, original_status


Resolve = Callable[[str], str]  # artifact URL -> local model directory (raises with a reason)


@dataclass(slots=True)
class _Instance:
    loaded: set[str] = field(default_factory=set)
    loading: dict[str, asyncio.Future[LoadOutcome]] = field(default_factory=dict)


class ModelLoads:
    """What each instance holds, and the loads under way (one per instance and model)."""

    def __init__(self, resolve: Resolve, clock: Callable[[], float] = time.perf_counter) -> None:
        self._resolve = resolve
        self._clock = clock
        self._instances: dict[str, _Instance] = {}
        self._resolved: dict[str, str] = {}  # artifact URL -> local directory, resolved once per gateway

    def forget(self, instance_id: str, name: str) -> None:
        self._instances.get(instance_id, _Instance()).loaded.discard(name)

    def forget_instance(self, instance_id: str) -> None:
        self._instances.pop(instance_id, None)

    def holds(self, instance_id: str, name: str) -> bool:
        found = self._instances.get(instance_id)
        return found is not None and name in found.loaded

    async def ensure(
        self,
        session: aiohttp.ClientSession,
        instance_id: str,
        url: str,
        prefix: str,
        target: str,
        pinned: bool = False,
    ) -> LoadOutcome:
        """Make sure the instance at ``url`` holds ``target``; concurrent callers share one load."""
        name = model_name(target)
        state = self._instances.setdefault(instance_id, _Instance())
        if name in state.loaded:
            return LoadOutcome(hit=True, loaded_models=len(state.loaded))
        began = self._clock()
        pending = state.loading.get(name)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            state.loading[name] = pending
            try:
                outcome = await self._load(session, state, url, prefix, target, name, pinned)
            except BaseException as exc:
                pending.set_exception(exc)
                pending.exception()  # retrieved: nobody else may be waiting
                raise
            finally:
                state.loading.pop(name, None)
            pending.set_result(outcome)
            return outcome
        await asyncio.shield(pending)
        # the load was another request's: this one only waited for it (its costs are counted once, there)
        return LoadOutcome(False, self._clock() - began, loaded_models=len(state.loaded))

    async def _load(
        self,
        session: aiohttp.ClientSession,
        state: _Instance,
        url: str,
        prefix: str,
        target: str,
        name: str,
        pinned: bool,
    ) -> LoadOutcome:
        began = self._clock()
        artifact = join(prefix, target)
        local = self._resolved.get(artifact)
        if local is None:
            try:
                local = await asyncio.to_thread(self._resolve, artifact)
            except Exception as exc:
                raise LoadError(
                    "ValidationError", 400, f"Could not find or use model data for TargetModel {target}: {exc}"
                ) from None
            self._resolved[artifact] = local
        downloaded = self._clock()
        body: dict[str, object] = {"model_name": name, "url": local}
        if pinned:
            body["pinned"] = True
        async with session.post(f"{url}/models", json=body) as resp:
            text = (await resp.read()).decode("utf-8", "replace")
            doc = _json(text)
        if resp.status == 409:  # already there (a gateway restart forgot it): fine
            state.loaded.add(name)
        elif resp.status == 507:
            raise LoadError(
                "ModelError",
                424,
                f"TargetModel {target} does not fit in the instance's memory: {doc.get('error', text)}",
                507,
            )
        elif resp.status != 200:
            raise LoadError(
                "ModelError", 424, f"TargetModel {target} failed to load: {doc.get('error', text)}", resp.status
            )
        state.loaded.add(name)
        listed = doc.get("evicted")
        evicted = [str(x) for x in listed] if isinstance(listed, list) else []
        for gone in evicted:
            state.loaded.discard(str(gone))
        times = doc.get("unloadSeconds")
        unload_s = tuple(float(x) for x in times) if isinstance(times, list) else (0.0,) * len(evicted)
        done = self._clock()
        return LoadOutcome(False, done - began, downloaded - began, done - downloaded, unload_s, len(state.loaded))


async def unload(session: aiohttp.ClientSession, url: str, target: str) -> None:
    """Ask an instance to unload ``target`` (ModelCacheSetting Disabled); a model already gone is fine."""
    async with session.delete(f"{url}/models/{model_name(target)}") as resp:
        await resp.read()


def _json(text: str) -> dict[str, object]:
    import json

    try:
        doc = json.loads(text)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}
