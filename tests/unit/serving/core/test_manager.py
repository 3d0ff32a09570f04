"""The model manager driven by the fake loader: hot swap, leases, failures, labels, config changes."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

import numpy as np
import pytest

from servekit.config.models import ModelConfig, VersionPolicy
from servekit.errors import ErrorCode, ServekitError
from servekit.serving.core.manager import ModelManager
from servekit.serving.lifecycle import ServableState
from servekit.serving.repository.source import RepositorySource
from servekit.storage import Storage
from servekit.testing import FakeLoader, write_fake_version

S = ServableState


def run(fn: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(fn())


class Lifecycle:
    """The manager's lifecycle observer: records every state change and load, and lets a test await one.

    Both callbacks run on the event loop (the manager's bookkeeping thread), so plain asyncio events suffice."""

    def __init__(self) -> None:
        self.states: list[tuple[str, int, S]] = []
        self.loads: list[tuple[str, int, bool]] = []
        self._changed = asyncio.Event()

    def on_state(self, model: str, version: int, state: S) -> None:
        self.states.append((model, version, state))
        self._changed.set()

    def on_load(self, model: str, version: int, seconds: float, ok: bool) -> None:
        self.loads.append((model, version, ok))
        self._changed.set()

    async def _until(self, seen: Callable[[], bool]) -> None:
        while not seen():
            self._changed.clear()
            await asyncio.wait_for(self._changed.wait(), timeout=10)

    async def reached(self, version: int, state: S, model: str = "m") -> None:
        """Return once ``model`` ``version`` has entered ``state``."""
        await self._until(lambda: (model, version, state) in self.states)

    async def load_finished(self, version: int, ok: bool, model: str = "m") -> None:
        """Return once a load attempt of ``model`` ``version`` has ended with ``ok``."""
        await self._until(lambda: (model, version, ok) in self.loads)


def setup(tmp_path: Path, **cfg: object) -> tuple[ModelManager, RepositorySource, FakeLoader, Path, Lifecycle]:
    base = tmp_path / "m"
    base.mkdir()
    loader = FakeLoader()
    events = Lifecycle()
    manager = ModelManager(loader, max_load_retries=int(cfg.pop("retries", 1)), retry_interval=0.0, observer=events)
    model = ModelConfig("m", str(base), **cfg)  # type: ignore[arg-type]
    source = RepositorySource(Storage(), manager, [model], poll_wait=0)
    manager.set_models([model])
    return manager, source, loader, base, events


def states(manager: ModelManager) -> dict[int, S]:
    return {s.version: s.state for s in manager.status("m")}


def test_new_version_loads_before_old_unloads(tmp_path: Path) -> None:
    async def main() -> None:
        manager, source, loader, base, events = setup(tmp_path)
        write_fake_version(base, 1)
        source.poll_once()
        await manager.wait_idle()
        assert states(manager) == {1: S.AVAILABLE}
        loader.gate.clear()  # hold the load of version 2 open
        write_fake_version(base, 2)
        source.poll_once()
        await events.reached(2, S.LOADING)
        assert states(manager) == {1: S.AVAILABLE, 2: S.LOADING}
        assert manager.resolve("m") == 1  # still served by 1 while 2 loads
        loader.gate.set()
        await manager.wait_idle()
        assert states(manager) == {1: S.END, 2: S.AVAILABLE}
        assert manager.resolve("m") == 2
        assert loader.servables[("m", 1)].unloaded

    run(main)


def test_unload_waits_for_leases(tmp_path: Path) -> None:
    async def main() -> None:
        manager, source, loader, base, events = setup(tmp_path)
        write_fake_version(base, 1)
        source.poll_once()
        await manager.wait_idle()
        with manager.lease("m") as lease:
            assert lease.version == 1
            write_fake_version(base, 2)
            source.poll_once()
            await events.reached(1, S.UNLOADING)  # version 2 loaded on the load thread, then 1 began to drain
            # 2 is up, 1 is draining: new requests get 2, the held lease keeps 1 alive.
            assert states(manager) == {1: S.UNLOADING, 2: S.AVAILABLE}
            assert manager.resolve("m") == 2
            assert not loader.servables[("m", 1)].unloaded
        await manager.wait_idle()
        assert states(manager)[1] is S.END
        assert loader.servables[("m", 1)].unloaded

    run(main)


def test_corrupt_version_never_replaces_working_one(tmp_path: Path) -> None:
    async def main() -> None:
        manager, source, loader, base, _ = setup(tmp_path, retries=2)
        write_fake_version(base, 2)
        source.poll_once()
        await manager.wait_idle()
        write_fake_version(base, 3, "corrupt")
        source.poll_once()
        await manager.wait_idle()
        status = {s.version: s for s in manager.status("m")}
        assert status[2].state is S.AVAILABLE
        assert status[3].state is S.ERROR
        assert "corrupt model file" in status[3].error
        assert manager.resolve("m") == 2
        assert ("m", 3) not in loader.loaded
        with pytest.raises(ServekitError) as info:
            manager.resolve("m", version=3)
        assert info.value.code is ErrorCode.NOT_FOUND
        assert "failed to load" in info.value.message and "available versions: 2" in info.value.message
        # Polling again does not retry the failed version forever.
        source.poll_once()
        await manager.wait_idle()
        assert states(manager)[3] is S.ERROR

    run(main)


def test_retries_then_succeeds(tmp_path: Path) -> None:
    async def main() -> None:
        manager, source, loader, base, _ = setup(tmp_path, retries=3)
        d = write_fake_version(base, 1, "corrupt")
        attempts = 0
        real = loader.__call__

        def flaky(path: str, model: ModelConfig) -> object:
            nonlocal attempts
            attempts += 1
            if attempts == 2:
                (d / "fake.txt").write_text("5")
            return real(path, model)

        manager._loader = flaky  # type: ignore[assignment]
        source.poll_once()
        await manager.wait_idle()
        assert attempts == 2
        assert states(manager) == {1: S.AVAILABLE}

    run(main)


def test_only_version_failing_gives_unavailable_with_cause(tmp_path: Path) -> None:
    async def main() -> None:
        manager, source, _, base, _ = setup(tmp_path)
        write_fake_version(base, 1, "corrupt")
        source.poll_once()
        await manager.wait_idle()
        with pytest.raises(ServekitError) as info:
            manager.resolve("m")
        assert info.value.code is ErrorCode.UNAVAILABLE
        assert "corrupt model file" in info.value.message
        assert not manager.all_ready()

    run(main)


def test_before_first_scan_is_unavailable(tmp_path: Path) -> None:
    async def main() -> None:
        manager, _, _, _, _ = setup(tmp_path)
        with pytest.raises(ServekitError) as info:
            manager.resolve("m")
        assert info.value.code is ErrorCode.UNAVAILABLE

    run(main)


def test_unknown_model_lists_models(tmp_path: Path) -> None:
    async def main() -> None:
        manager, _, _, _, _ = setup(tmp_path)
        with pytest.raises(ServekitError) as info:
            manager.resolve("nope")
        assert info.value.code is ErrorCode.NOT_FOUND
        assert "models: m" in info.value.message

    run(main)


def test_labels(tmp_path: Path) -> None:
    async def main() -> None:
        manager, source, _, base, _ = setup(
            tmp_path, version_policy=VersionPolicy("all"), version_labels={"stable": 1, "canary": 2, "next": 9}
        )
        write_fake_version(base, 1)
        write_fake_version(base, 2)
        source.poll_once()
        await manager.wait_idle()
        assert manager.resolve("m", label="stable") == 1
        assert manager.resolve("m", label="canary") == 2
        with pytest.raises(ServekitError, match="points at version 9, which is not available"):
            manager.resolve("m", label="next")
        with pytest.raises(ServekitError, match="labels: canary, next, stable"):
            manager.resolve("m", label="missing")

    run(main)


def test_removed_version_is_unloaded_and_readded_reloads(tmp_path: Path) -> None:
    async def main() -> None:
        import shutil

        manager, source, loader, base, _ = setup(tmp_path, version_policy=VersionPolicy("all"))
        write_fake_version(base, 1)
        write_fake_version(base, 2)
        source.poll_once()
        await manager.wait_idle()
        shutil.rmtree(base / "1")
        source.poll_once()
        await manager.wait_idle()
        assert states(manager) == {1: S.END, 2: S.AVAILABLE}
        write_fake_version(base, 1)
        source.poll_once()
        await manager.wait_idle()
        assert states(manager) == {1: S.AVAILABLE, 2: S.AVAILABLE}
        assert loader.loaded.count(("m", 1)) == 2

    run(main)


def test_model_removed_from_config(tmp_path: Path) -> None:
    async def main() -> None:
        manager, source, loader, base, _ = setup(tmp_path)
        write_fake_version(base, 1)
        source.poll_once()
        await manager.wait_idle()
        manager.set_models([])
        await manager.wait_idle()
        assert manager.model_names == []
        assert loader.servables[("m", 1)].unloaded

    run(main)


def test_predict_through_lease(tmp_path: Path) -> None:
    async def main() -> None:
        manager, source, _, base, _ = setup(tmp_path)
        write_fake_version(base, 3)
        source.poll_once()
        await manager.wait_idle()
        with manager.lease("m") as lease:
            out = lease.servable.predict("serving_default", {"x": np.ones((2, 2), np.float32)})
        np.testing.assert_allclose(out["y"], np.full((2, 2), 4.0))

    run(main)


def test_close_unloads_everything(tmp_path: Path) -> None:
    async def main() -> None:
        manager, source, loader, base, _ = setup(tmp_path)
        write_fake_version(base, 1)
        source.poll_once()
        await manager.wait_idle()
        await manager.close()
        assert loader.servables[("m", 1)].unloaded

    run(main)


def test_removing_a_model_with_nothing_loaded_drops_it(tmp_path: Path) -> None:
    async def main() -> None:
        manager, source, _, _, _ = setup(tmp_path)  # base path exists but holds no version
        source.poll_once()
        await manager.wait_idle()
        assert manager.model_names == ["m"] and not manager.all_ready()
        manager.set_models([])
        await manager.wait_idle()
        assert manager.model_names == []

    run(main)


def test_a_scan_finishing_after_removal_does_not_bring_the_model_back(tmp_path: Path) -> None:
    async def main() -> None:
        manager, source, loader, base, _ = setup(tmp_path)
        write_fake_version(base, 1)
        scanned = source.scan()  # taken before the config change...
        manager.set_models([])
        source.announce(scanned)  # ...announced after it
        await manager.wait_idle()
        assert manager.model_names == []
        assert loader.loaded == []

    run(main)


def test_close_does_not_wait_out_the_retry_backoff(tmp_path: Path) -> None:
    async def main() -> None:
        base = tmp_path / "m"
        write_fake_version(base, 1, "corrupt")
        events = Lifecycle()
        manager = ModelManager(FakeLoader(), max_load_retries=5, retry_interval=3600.0, observer=events)
        model = ModelConfig("m", str(base))
        manager.set_models([model])
        RepositorySource(Storage(), manager, [model], poll_wait=0).poll_once()
        await events.load_finished(1, ok=False)  # the first attempt failed: now an hour-long backoff
        assert manager.settled() and not manager.all_ready()
        await asyncio.wait_for(manager.close(), timeout=10)
        assert manager.status("m")[0].state is S.ERROR

    run(main)


def test_lease_hold_outlives_a_cancelled_request(tmp_path: Path) -> None:
    async def main() -> None:
        manager, source, loader, base, events = setup(tmp_path)
        write_fake_version(base, 1)
        source.poll_once()
        await manager.wait_idle()
        work: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with manager.lease("m") as lease:
            lease.hold(work)  # a model call still running on a thread when the request goes away
        write_fake_version(base, 2)
        source.poll_once()
        await events.reached(1, S.UNLOADING)
        assert states(manager)[1] is S.UNLOADING
        assert not loader.servables[("m", 1)].unloaded  # the held work keeps version 1 loaded
        work.set_result(None)
        await manager.wait_idle()
        assert loader.servables[("m", 1)].unloaded

    run(main)


def test_a_failed_version_is_loaded_again_once_its_files_change(tmp_path: Path) -> None:
    """Item 9 of the hardening issue: a version that failed to load is tried again when a later poll finds
    its files changed (a fixed model file), without a restart; polls that find it unchanged leave it alone."""

    async def main() -> None:
        manager, source, loader, base, events = setup(tmp_path, retries=1)
        d = write_fake_version(base, 1, "corrupt")
        source.poll_once()
        await manager.wait_idle()
        assert states(manager) == {1: S.ERROR}
        assert events.loads == [("m", 1, False)] * 2  # the first attempt and one retry
        for _ in range(3):  # unchanged files: no further attempts, however often the source polls
            source.poll_once()
            await manager.wait_idle()
        assert events.loads == [("m", 1, False)] * 2
        (d / "fake.txt").write_text("7")  # the cause is fixed
        source.poll_once()
        await events.reached(1, S.AVAILABLE)
        await manager.wait_idle()
        assert manager.status("m")[0].state is S.AVAILABLE and manager.status("m")[0].error == ""
        assert manager.resolve("m") == 1
        assert [s for m, v, s in events.states] == [S.LOADING, S.ERROR, S.END, S.LOADING, S.AVAILABLE]
        assert loader.loaded == [("m", 1)]
        # Loaded now: later polls neither fingerprint nor reload it.
        source.poll_once()
        await manager.wait_idle()
        assert loader.loaded == [("m", 1)] and events.loads[-1] == ("m", 1, True) and len(events.loads) == 3

    run(main)


def test_a_fix_made_while_the_last_attempt_runs_is_not_missed(tmp_path: Path) -> None:
    """The files are fixed after the last attempt read them but before it failed, and a poll reports the new
    files while the version is still LOADING: the failure is of the old files, so the next poll retries."""

    async def main() -> None:
        manager, source, _, base, events = setup(tmp_path, retries=0)
        d = write_fake_version(base, 1, "corrupt")
        read, release = threading.Event(), threading.Event()
        real = FakeLoader()

        def slow_reader(path: str, model: ModelConfig) -> object:
            broken = (Path(path) / "fake.txt").read_text() == "corrupt"
            read.set()
            release.wait(timeout=10)
            if broken:
                raise ValueError("corrupt model file")
            return real(path, model)

        manager._loader = slow_reader  # type: ignore[assignment]
        source.poll_once()
        assert await asyncio.to_thread(read.wait, 10)  # the attempt has read the broken file
        (d / "fake.txt").write_text("7")
        source.poll_once()  # reports the fixed files while the attempt is still running
        release.set()
        await events.load_finished(1, ok=False)
        await manager.wait_idle()
        assert states(manager) == {1: S.ERROR}
        source.poll_once()
        await manager.wait_idle()
        assert states(manager) == {1: S.AVAILABLE}
        assert real.loaded == [("m", 1)]

    run(main)


def test_a_failed_version_replaced_by_a_newer_one_is_not_retried(tmp_path: Path) -> None:
    """Only aspired versions are retried: a failed version 1 that ``latest{1}`` no longer wants just ends."""

    async def main() -> None:
        manager, source, loader, base, _ = setup(tmp_path)
        d = write_fake_version(base, 1, "corrupt")
        source.poll_once()
        await manager.wait_idle()
        write_fake_version(base, 2)
        (d / "fake.txt").write_text("1")
        source.poll_once()
        await manager.wait_idle()
        assert states(manager) == {1: S.END, 2: S.AVAILABLE}
        assert loader.loaded == [("m", 2)]

    run(main)


def test_a_version_between_retries_says_why_its_last_attempt_failed(tmp_path: Path) -> None:
    async def main() -> None:
        base = tmp_path / "m"
        write_fake_version(base, 1, "corrupt")
        events = Lifecycle()
        manager = ModelManager(FakeLoader(), max_load_retries=5, retry_interval=3600.0, observer=events)
        model = ModelConfig("m", str(base))
        manager.set_models([model])
        RepositorySource(Storage(), manager, [model], poll_wait=0).poll_once()
        await events.load_finished(1, ok=False)  # now waiting an hour before the next attempt
        with pytest.raises(ServekitError) as err:
            manager.lease("m")
        assert err.value.code is ErrorCode.UNAVAILABLE
        assert "not loaded yet (loading versions: 1); version 1's last attempt failed: corrupt model file" in (
            err.value.message
        )
        await asyncio.wait_for(manager.close(), timeout=10)

    run(main)
