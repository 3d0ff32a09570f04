"""Integration fixtures: the in-process app with every demo version loaded, and reference models.

The reference models are the same demo artifacts loaded directly with onnxruntime / joblib, so every
prediction the server returns is checked against an independent computation rather than a pasted number.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import joblib
import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import pytest
from starlette.testclient import TestClient


@pytest.fixture(scope="module")
def client(client: TestClient) -> TestClient:
    """The shared client, after every configured version (not just one per model) has finished loading.

    ``/v2/health/ready`` turns 200 once each model has *a* version; iris version 1 may still be loading
    then. Waiting for the manager to go idle runs on the app's own event loop: no polling, no sleeps.
    """
    assert client.portal is not None
    client.portal.call(client.app.state.core.manager.wait_idle)
    return client


@pytest.fixture(scope="session")
def iris_onnx(demo_repo: Path) -> Callable[[int, npt.ArrayLike], dict[str, npt.NDArray[Any]]]:
    """Run iris version ``v`` straight through onnxruntime: {"label": ..., "probabilities": ...}."""
    sessions = {
        v: ort.InferenceSession(str(demo_repo / "iris" / str(v) / "model.onnx"), providers=["CPUExecutionProvider"])
        for v in (1, 2)
    }

    def run(version: int, x: npt.ArrayLike) -> dict[str, npt.NDArray[Any]]:
        sess = sessions[version]
        names = [o.name for o in sess.get_outputs()]
        outs = sess.run(names, {"X": np.asarray(x, dtype=np.float32)})
        return dict(zip(names, (np.asarray(o) for o in outs), strict=True))

    return run


@pytest.fixture(scope="session")
def iris_sklearn(demo_repo: Path) -> Any:
    return joblib.load(demo_repo / "iris_sklearn" / "1" / "model.joblib")


@pytest.fixture(scope="session")
def iris_handler_model(demo_repo: Path) -> Any:
    return joblib.load(demo_repo / "iris_handler" / "1" / "model.joblib")


@pytest.fixture(scope="session")
def diabetes(demo_repo: Path) -> Any:
    return joblib.load(demo_repo / "diabetes" / "1" / "model.joblib")
