"""Error bodies say what the client can act on and no more (the rest goes to the log with a request id)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from servekit.config.models import ModelConfig, ServerConfig
from servekit.serving.core.assembly import ServingCore
from servekit.serving.runtime.registry import RuntimeRegistry
from servekit.testing import FakeRuntime, write_fake_version
from servekit.testing.app_client import app_client

ROW = {"instances": [[1.0, 2.0]]}


@pytest.fixture
def config(tmp_path: Path) -> ServerConfig:
    write_fake_version(tmp_path / "boom", 1, "raise")  # loads, then raises on every predict
    write_fake_version(tmp_path / "ok", 1, "0.5")
    models = (ModelConfig("boom", str(tmp_path / "boom")), ModelConfig("ok", str(tmp_path / "ok")))
    return ServerConfig(models=models, file_system_poll_wait_seconds=0)


def client_for(config: ServerConfig, address: tuple[str, int]) -> Iterator[TestClient]:
    core = ServingCore(config, RuntimeRegistry((FakeRuntime(),)))
    with app_client(config, core, client_address=address) as c:
        yield c


@pytest.fixture
def local(config: ServerConfig) -> Iterator[TestClient]:
    yield from client_for(config, ("127.0.0.1", 40000))


@pytest.fixture
def remote(config: ServerConfig) -> Iterator[TestClient]:
    yield from client_for(config, ("203.0.113.7", 40000))


def test_a_model_failure_is_logged_with_an_id_and_the_body_carries_only_the_id(
    remote: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    assert remote.post("/v1/models/ok:predict", json=ROW).status_code == 200
    with caplog.at_level(logging.ERROR, logger="servekit.serving.protocols.http"):
        r = remote.post("/v1/models/boom:predict", json=ROW)
    assert r.status_code == 500
    message = r.json()["error"]
    rid = r.headers["x-servekit-request-id"]
    assert (
        message
        == f"model 'boom' version 1 failed while running the request (request id {rid}; the server log has the details)"
    )
    assert "RuntimeError" not in message and "fake model failure" not in message
    logged = [rec.getMessage() for rec in caplog.records]
    assert any(rid in m and "RuntimeError: fake model failure" in m for m in logged), logged


@pytest.mark.parametrize("path", ["/v1/models/nope:predict", "/v2/models/nope/infer"])
def test_only_a_trusted_caller_is_told_which_models_exist(local: TestClient, remote: TestClient, path: str) -> None:
    body = (
        ROW
        if path.startswith("/v1")
        else {"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]}
    )
    far = remote.post(path, json=body)
    near = local.post(path, json=body)
    assert far.status_code == near.status_code == 404
    assert "boom" not in far.json()["error"] and "'nope'" in far.json()["error"]
    assert "models: boom, ok" in near.json()["error"]


def test_sagemaker_without_a_model_name_lists_models_only_to_a_trusted_caller(
    local: TestClient, remote: TestClient
) -> None:
    far = remote.post("/invocations", json=[[1.0, 2.0]])
    near = local.post("/invocations", json=[[1.0, 2.0]])
    assert far.status_code == near.status_code == 400
    assert "tfs-model-name" in far.json()["error"] and "boom" not in far.json()["error"]
    assert "boom" in near.json()["error"]


def test_status_names_files_relative_to_the_model(tmp_path: Path) -> None:
    write_fake_version(tmp_path / "bad", 1, "corrupt")  # fails to load: "corrupt model file in <abs path>"
    cfg = ServerConfig(
        models=(ModelConfig("bad", str(tmp_path / "bad")),), file_system_poll_wait_seconds=0, max_num_load_retries=0
    )
    for c in client_for(cfg, ("203.0.113.7", 40000)):
        (status,) = c.get("/v1/models/bad").json()["model_version_status"]
        message = status["status"]["error_message"]
        assert "corrupt model file in <bad>/1" in message, message
        assert str(tmp_path) not in message


LEAKY = """
def model_fn(model_dir):
    return 2.0

def input_fn(body, content_type):
    raise ValueError("cannot open /srv/secrets/db.txt: password=hunter2")

def predict_fn(data, model):
    return data
"""


def test_a_handlers_own_input_fn_error_text_goes_to_the_log_not_the_client(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """User code's exception text may carry a path or a secret: the 400 says what failed, with a request id."""
    from servekit.testing.app_client import LOOPBACK, serving_app, wait_until_loaded

    code = tmp_path / "leaky" / "1" / "code"
    code.mkdir(parents=True)
    (code / "inference.py").write_text(LEAKY)
    config = ServerConfig(models=(ModelConfig("leaky", str(tmp_path / "leaky")),), file_system_poll_wait_seconds=0)
    with TestClient(serving_app(config), raise_server_exceptions=False, client=LOOPBACK) as c:
        wait_until_loaded(c)
        with caplog.at_level(logging.INFO, logger="servekit.serving.protocols.http"):
            r = c.post(
                "/invocations",
                content=b"[1, 2]",
                headers={"X-Amzn-SageMaker-Custom-Attributes": "tfs-model-name=leaky", "Content-Type": "text/csv"},
            )
    assert r.status_code == 400, r.text
    body = r.text
    assert "password" not in body and "/srv/secrets" not in body
    rid = r.headers["x-servekit-request-id"]
    assert f"the handler's input_fn refused the body as text/csv (ValueError) (request id {rid}" in body
    logged = [rec.getMessage() for rec in caplog.records]
    assert any(rid in m and "password=hunter2" in m for m in logged), logged
