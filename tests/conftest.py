from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from servekit.config.loading import load_model_config_file
from servekit.config.models import ServerConfig
from servekit.demo.build import build_demo
from servekit.testing.app_client import LOOPBACK, serving_app, wait_until_loaded


@pytest.fixture(scope="session")
def demo_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo model repository (iris ONNX v1+v2, iris_sklearn, diabetes, iris_handler), built once."""
    base = tmp_path_factory.mktemp("demo-models")
    build_demo(base)
    return base


def wait_ready(client: TestClient) -> None:
    """Every configured version has loaded (or failed): waits on the manager, not on a clock."""
    wait_until_loaded(client)


@pytest.fixture(scope="session")
def demo_config(demo_repo: Path) -> ServerConfig:
    models = load_model_config_file(demo_repo / "models.config")
    return ServerConfig(models=models, file_system_poll_wait_seconds=0, max_request_bytes=1_000_000)


@pytest.fixture(scope="module")
def client(demo_config: ServerConfig) -> Iterator[TestClient]:
    """The whole app in process, every demo model loaded."""
    app = serving_app(demo_config)
    with TestClient(app, raise_server_exceptions=False, client=LOOPBACK) as c:
        wait_ready(c)
        yield c
