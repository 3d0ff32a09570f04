"""TF Serving model status of versions that failed to load, through the whole REST app (fake runtime): a failed
version reports a non-OK error code whatever state it is in, and is served once its files are fixed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

from servekit.config.models import ModelConfig, ServerConfig, VersionPolicy
from servekit.serving.core.assembly import ServingCore
from servekit.serving.runtime.registry import RuntimeRegistry
from servekit.testing import FakeRuntime, write_fake_version
from servekit.testing.app_client import app_client


def _poll(client: TestClient) -> None:
    """One poll of the model directory on the app's loop, then wait until the manager has acted on it."""
    assert client.portal is not None
    core: ServingCore = client.app.state.core  # type: ignore[attr-defined]
    client.portal.call(core.source.poll)
    client.portal.call(core.manager.wait_idle)


def _status(client: TestClient) -> dict[str, dict[str, Any]]:
    r = client.get("/v1/models/m")
    assert r.status_code == 200, r.text
    return {s["version"]: s for s in r.json()["model_version_status"]}


def _config(base: Path, policy: VersionPolicy) -> ServerConfig:
    return ServerConfig(
        models=(ModelConfig("m", str(base), version_policy=policy),),
        file_system_poll_wait_seconds=0,  # polled by the test
        max_num_load_retries=0,
    )


def test_a_failed_version_that_ended_keeps_a_non_ok_code(tmp_path: Path) -> None:
    base = tmp_path / "m"
    write_fake_version(base, 1, "corrupt")
    config = _config(base, VersionPolicy())
    with app_client(config, ServingCore(config, RuntimeRegistry((FakeRuntime(),)))) as client:
        v1 = _status(client)["1"]
        assert v1["state"] == "END" and v1["status"]["error_code"] == "UNKNOWN"
        write_fake_version(base, 2)  # latest{1} now wants 2: the failed 1 leaves the aspired set and ends
        _poll(client)
        status = _status(client)
        assert status["2"]["state"] == "AVAILABLE"
        assert status["2"]["status"] == {"error_code": "OK", "error_message": ""}
        assert status["1"]["state"] == "END"
        assert "corrupt model file" in status["1"]["status"]["error_message"]
        assert status["1"]["status"]["error_code"] != "OK"


def test_a_failed_version_is_served_once_fixed(tmp_path: Path) -> None:
    base = tmp_path / "m"
    d = write_fake_version(base, 1, "corrupt")
    config = _config(base, VersionPolicy())
    with app_client(config, ServingCore(config, RuntimeRegistry((FakeRuntime(),)))) as client:
        assert client.post("/v1/models/m:predict", json={"instances": [[1.0, 2.0]]}).status_code == 503
        _poll(client)  # unchanged: still failed
        assert _status(client)["1"]["status"]["error_code"] == "UNKNOWN"
        (d / "fake.txt").write_text("10")
        _poll(client)
        assert _status(client)["1"] == {
            "version": "1",
            "state": "AVAILABLE",
            "status": {"error_code": "OK", "error_message": ""},
        }
        r = client.post("/v1/models/m:predict", json={"instances": [[1.0, 2.0]]})
        assert r.status_code == 200, r.text
        assert r.json() == {"predictions": [[11.0, 12.0]]}
