"""The serving core's own decisions (no HTTP): which batching settings a model gets."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from servekit.config.models import BatchingConfig, ModelConfig, ServerConfig
from servekit.serving.core.assembly import ServingCore

SERVER = BatchingConfig(max_batch_size=8)
OWN = BatchingConfig(max_batch_size=32)


@pytest.fixture
def core() -> Iterator[ServingCore]:
    cfg = ServerConfig(
        models=(ModelConfig("plain", "/nowhere/plain"), ModelConfig("own", "/nowhere/own", batching=OWN)),
        batching=SERVER,
    )
    c = ServingCore(cfg)
    c.manager.set_models(cfg.models)
    yield c
    c.threads.shutdown()


def test_a_model_without_its_own_batching_gets_the_servers(core: ServingCore) -> None:
    assert core._batching_for("plain") is SERVER


def test_a_models_own_batching_wins_over_the_servers(core: ServingCore) -> None:
    assert core._batching_for("own") is OWN


def test_without_server_batching_only_models_that_ask_batch() -> None:
    cfg = ServerConfig(models=(ModelConfig("plain", "/p"), ModelConfig("own", "/o", batching=OWN)))
    c = ServingCore(cfg)
    try:
        c.manager.set_models(cfg.models)
        assert c._batching_for("plain") is None
        assert c._batching_for("own") is OWN
    finally:
        c.threads.shutdown()
