"""SageMaker's multi-model container API on one serving process (fake runtime, in-process app): load, list, get,
invoke, unload, the contract's statuses (409, 404, 507), concurrent loads of one model, flat model directories,
and eviction by memory — least recently used first, never a model with a request in flight."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from starlette.testclient import TestClient

from servekit.config.models import ServerConfig
from servekit.serving.core.assembly import ServingCore
from servekit.serving.core.multi_model import InsufficientMemory, MultiModelHost
from servekit.serving.runtime.registry import RuntimeRegistry
from servekit.testing import FakeRuntime, write_fake_version
from servekit.testing.app_client import app_client

CONFIG = ServerConfig(models=(), multi_model=True, file_system_poll_wait_seconds=0, max_num_load_retries=0)


@contextmanager
def client() -> Iterator[TestClient]:
    with app_client(CONFIG, ServingCore(CONFIG, RuntimeRegistry((FakeRuntime(),)))) as c:
        yield c


def model(tmp: Path, name: str, offset: str = "1") -> str:
    write_fake_version(tmp / name, 1, offset)
    return str(tmp / name)


def invoke(c: TestClient, name: str, x: float = 1.0) -> tuple[int, object]:
    r = c.post(f"/models/{name}/invoke", json={"instances": [{"x": [x, x]}]})
    return r.status_code, r.json()


def test_load_list_invoke_unload(tmp_path: Path) -> None:
    with client() as c:
        assert c.get("/ping").status_code == 200  # an empty multi-model host is healthy
        assert c.get("/models").json() == {"models": []}
        r = c.post("/models", json={"model_name": "a", "url": model(tmp_path, "a", "10")})
        assert r.status_code == 200, r.text
        assert r.json()["footprintBytes"] > 0 and r.json()["evicted"] == []
        assert c.post("/models", json={"model_name": "a", "url": model(tmp_path, "a2")}).status_code == 409
        c.post("/models", json={"model_name": "b", "url": model(tmp_path, "b", "20")})
        assert invoke(c, "a") == (200, {"predictions": [[11.0, 11.0]]})
        assert invoke(c, "b") == (200, {"predictions": [[21.0, 21.0]]})
        listed = c.get("/models").json()["models"]
        assert [m["modelName"] for m in listed] == ["a", "b"]
        assert c.get("/models/a").json() == {"modelName": "a", "modelUrl": str(tmp_path / "a")}
        assert c.delete("/models/a").status_code == 200
        assert c.get("/models/a").status_code == 404
        status, body = invoke(c, "a")
        assert status == 404 and "not loaded" in str(body)
        assert c.delete("/models/a").status_code == 404
        assert invoke(c, "b")[0] == 200


def test_bad_requests_get_clear_answers(tmp_path: Path) -> None:
    with client() as c:
        r = c.post("/models", content=b"{not json")
        assert r.status_code == 400 and "model_name" in r.json()["error"]
        assert c.post("/models", json={"model_name": "x"}).status_code == 400
        r = c.post("/models", json={"model_name": "x", "url": str(tmp_path / "missing")})
        assert r.status_code == 404 and "not found" in r.json()["error"]
        r = c.post("/models", json={"model_name": "bad name!", "url": model(tmp_path, "n")})
        assert r.status_code == 400
        r = c.post("/models", json={"model_name": "broken", "url": model(tmp_path, "broken", "corrupt")})
        assert r.status_code == 500 and "broken failed to load" in r.json()["error"]
        assert c.get("/models").json() == {"models": []}  # the failed model is not left behind
        ok = c.post("/models", json={"model_name": "fine", "url": model(tmp_path, "fine")})
        assert ok.status_code == 200  # the instance serves on
        assert c.get("/models?next_page_token=abc").status_code == 400


def test_a_flat_model_directory_is_served_as_version_1(tmp_path: Path) -> None:
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "fake.txt").write_text("5")
    with client() as c:
        assert c.post("/models", json={"model_name": "flat", "url": str(flat)}).status_code == 200
        assert invoke(c, "flat") == (200, {"predictions": [[6.0, 6.0]]})


# ---- the host itself, with its memory measured by a stand-in --------------------------------------------------
class Memory:
    """Resident memory as the host sees it: a base plus 10 units per model the manager holds."""

    def __init__(self, core: ServingCore) -> None:
        self.core = core

    def __call__(self) -> int:
        return 100 + 10 * len(self.core.manager.model_names)


def run(coro_fn: object) -> None:
    asyncio.run(coro_fn())  # type: ignore[operator]


def test_eviction_is_lru_skips_models_in_flight_and_refuses_what_cannot_fit(tmp_path: Path) -> None:
    async def scenario() -> None:
        core = ServingCore(CONFIG, RuntimeRegistry((FakeRuntime(),)))
        await core.start()
        try:
            host = MultiModelHost(core, memory_limit_bytes=125, rss=Memory(core))
            for name in ("a", "b"):
                await host.load(name, model(tmp_path, name))
            assert sorted(host.models) == ["a", "b"]
            assert host.models["a"].footprint_bytes == 10
            with host.using("a"):  # a is now the most recently used, and in flight
                report = await host.load("c", model(tmp_path, "c"))
            assert report.evicted == ("b",) and sorted(host.models) == ["a", "c"]
            with host.using("c"):
                pass
            with host.using("a"):  # a in flight: c must go even though a is older than... nothing else
                report = await host.load("d", model(tmp_path, "d"))
            assert report.evicted == ("c",) and sorted(host.models) == ["a", "d"]
            assert host.unloads == 2

            for name in ("a", "d"):
                await host.unload(name)
            host.memory_limit_bytes = 105  # the empty process (100) plus less than one model (10)
            try:
                await host.load("huge", model(tmp_path, "huge"))
            except InsufficientMemory as exc:
                assert "does not fit" in exc.message
            else:
                raise AssertionError("a model bigger than the budget was loaded")
            assert host.models == {} and core.manager.model_names == []  # refused, and unloaded again
        finally:
            await core.stop()

    run(scenario)


def test_concurrent_loads_of_one_model_load_it_once(tmp_path: Path) -> None:
    async def scenario() -> None:
        core = ServingCore(CONFIG, RuntimeRegistry((FakeRuntime(),)))
        await core.start()
        try:
            host = MultiModelHost(core)
            url = model(tmp_path, "m")
            reports = await asyncio.gather(*(host.load("m", url) for _ in range(5)))
            assert len({id(r) for r in reports}) == 1  # one load; the others shared its outcome
            assert core.metrics is not None and list(host.models) == ["m"]
        finally:
            await core.stop()

    run(scenario)
