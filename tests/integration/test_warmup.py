"""Warmup: ``<version>/assets.extra/warmup_requests.jsonl`` is replayed before the version takes traffic.

The app runs in process. The handler model records every call it gets in a ``calls`` file (one line per
call: the rows it saw), so the tests see exactly which records reached the model; while a ``gate`` file
exists it waits (at most 20 s), which lets a test hold a load in the middle of its warmup.
"""

from __future__ import annotations

import json
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from numpy.testing import assert_allclose
from starlette.testclient import TestClient

from servekit.config.models import ModelConfig, ServerConfig
from servekit.serving.lifecycle import ServableState
from servekit.testing.app_client import serving_app
from servekit.tools.demo.build import iris_onnx

HANDLER = textwrap.dedent(
    """
    import time
    from pathlib import Path

    import numpy as np

    CTL = Path({ctl!r})


    def model_fn(model_dir):
        return 2.0


    def predict_fn(data, model):
        rows = np.asarray(data, dtype=np.float64)
        with open(CTL / "calls", "a") as f:
            f.write(f"{{len(rows)}}\\n")
        deadline = time.monotonic() + 20
        while (CTL / "gate").exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        if (rows == 13).any():
            raise ValueError("unlucky row")
        return rows * model
    """
).lstrip()
MANIFEST = textwrap.dedent(
    """
    [[signatures]]
    name = "serving_default"
    inputs = [{name = "inputs", datatype = "FP64", shape = [-1, 4]}]
    outputs = [{name = "predictions", datatype = "FP64", shape = [-1, 4]}]
    """
).lstrip()
ROW = [1.0, 2.0, 3.0, 4.0]
GOOD = [  # one of each accepted form
    {"instances": [ROW]},  # TF Serving REST, row format
    {"signature_name": "serving_default", "inputs": [ROW, [5.0, 6.0, 7.0, 8.0]]},  # TF REST, columnar
    {  # KServe V2
        "inputs": [{"name": "inputs", "datatype": "FP64", "shape": [1, 4], "data": ROW}],
        "parameters": {"signature_name": "serving_default"},
    },
    [ROW, [0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]],  # SageMaker JSON: a bare list of rows
]
GOOD_ROWS = [1, 2, 1, 3]  # rows per record above


@dataclass
class Handler:
    base: Path
    ctl: Path

    def version(self, v: int = 1) -> Path:
        return self.base / str(v)

    @property
    def gate(self) -> Path:
        return self.ctl / "gate"

    def calls(self) -> list[int]:
        path = self.ctl / "calls"
        return [int(x) for x in path.read_text().split()] if path.exists() else []

    def warmup_file(self, v: int = 1) -> Path:
        return self.version(v) / "assets.extra" / "warmup_requests.jsonl"

    def write_warmup(self, lines: list[str], v: int = 1) -> Path:
        path = self.warmup_file(v)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(line + "\n" for line in lines))
        return path


def handler_model(root: Path, name: str = "m") -> Handler:
    base, ctl = root / name, root / f"{name}-ctl"
    version = base / "1"
    (version / "code").mkdir(parents=True)
    ctl.mkdir()
    (version / "code" / "inference.py").write_text(HANDLER.format(ctl=str(ctl)))
    (version / "servekit.toml").write_text(MANIFEST)
    return Handler(base, ctl)


def config(*models: tuple[str, Path], **kwargs: Any) -> ServerConfig:
    return ServerConfig(
        models=tuple(ModelConfig(name=n, base_path=str(p)) for n, p in models),
        file_system_poll_wait_seconds=0,
        max_num_load_retries=0,
        **kwargs,
    )


def settle(client: TestClient) -> None:
    """Wait, on the app's own loop, until every load (and its warmup) has finished."""
    assert client.portal is not None
    client.portal.call(client.app.state.core.manager.wait_idle)  # type: ignore[attr-defined]


@contextmanager
def serve(cfg: ServerConfig, wait: bool = True) -> Iterator[TestClient]:
    with TestClient(serving_app(cfg), raise_server_exceptions=False) as c:
        if wait:
            settle(c)
        yield c


def states(client: TestClient, model: str) -> dict[int, tuple[ServableState, str]]:
    manager = client.app.state.core.manager  # type: ignore[attr-defined]
    return {s.version: (s.state, s.error) for s in manager.status(model)}


def predict(client: TestClient, model: str, rows: list[list[float]]) -> Any:
    return client.post(f"/v1/models/{model}:predict", json={"instances": rows})


def assert_serves(client: TestClient, model: str = "m") -> None:
    r = predict(client, model, [ROW])
    assert r.status_code == 200, r.text
    assert r.json() == {"predictions": [[2 * x for x in ROW]]}


def lines(records: list[Any]) -> list[str]:
    return [json.dumps(r) for r in records]


def test_every_record_form_is_replayed_before_the_version_serves(tmp_path: Path) -> None:
    handler = handler_model(tmp_path)
    # Blank lines are skipped; the records are replayed in file order.
    handler.write_warmup([*lines(GOOD[:2]), "", "   ", *lines(GOOD[2:])])
    iris_dir = iris_onnx(tmp_path / "iris" / "1")
    (iris_dir / "assets.extra").mkdir()
    v2 = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [2, 4], "data": [5.1, 3.5, 1.4, 0.2] * 2}]}
    (iris_dir / "assets.extra" / "warmup_requests.jsonl").write_text(
        "\n".join(json.dumps(r) for r in ({"instances": [[5.1, 3.5, 1.4, 0.2]]}, v2, [[6.0, 3.0, 4.8, 1.8]])) + "\n"
    )
    with serve(config(("m", handler.base), ("iris", tmp_path / "iris"))) as c:
        assert states(c, "m") == {1: (ServableState.AVAILABLE, "")}
        assert states(c, "iris") == {1: (ServableState.AVAILABLE, "")}
        assert handler.calls() == GOOD_ROWS  # each record once, before any request
        assert_serves(c)
        assert handler.calls() == [*GOOD_ROWS, 1]

        r = c.post("/v1/models/iris:predict", json={"instances": [[6.0, 3.0, 4.8, 1.8]]})
        assert r.status_code == 200, r.text
        sess = ort.InferenceSession(str(iris_dir / "model.onnx"), providers=["CPUExecutionProvider"])
        (probs,) = sess.run(["probabilities"], {"X": np.asarray([[6.0, 3.0, 4.8, 1.8]], dtype=np.float32)})
        assert_allclose(r.json()["predictions"][0]["probabilities"], probs[0], rtol=1e-5, atol=1e-6)


def test_each_record_is_replayed_num_request_iterations_times(tmp_path: Path) -> None:
    handler = handler_model(tmp_path)
    handler.write_warmup(lines(GOOD))
    with serve(config(("m", handler.base), num_request_iterations_for_warmup=3)) as c:
        assert states(c, "m")[1][0] is ServableState.AVAILABLE
        assert handler.calls() == [n for n in GOOD_ROWS for _ in range(3)]
        assert_serves(c)


BAD = {
    "malformed JSON": ('{"instances": [[1, 2, 3, 4]]', "malformed JSON", 0),
    "wrong shape": (json.dumps({"instances": [[1.0, 2.0, 3.0]]}), "has shape [1, 3], expected [-1, 4]", 0),
    "wrong V2 data": (
        json.dumps({"inputs": [{"name": "inputs", "datatype": "FP64", "shape": [1, 4], "data": [1.0, 2.0]}]}),
        "holds 4 elements but data has 2",
        0,
    ),
    "unknown signature": (json.dumps({"signature_name": "nope", "instances": [ROW]}), "no signature 'nope'", 0),
    "not a request": (json.dumps("hello"), "expected a JSON object or list", 0),
    "model raises": (json.dumps({"instances": [[13.0, 1.0, 1.0, 1.0]]}), "unlucky row", 1),
}


@pytest.mark.parametrize(("record", "fragment", "reached_model"), list(BAD.values()), ids=list(BAD))
def test_a_bad_record_fails_the_load_naming_file_and_line(
    tmp_path: Path, record: str, fragment: str, reached_model: int
) -> None:
    handler = handler_model(tmp_path)
    path = handler.write_warmup([json.dumps(GOOD[0]), "", record, json.dumps(GOOD[1])])
    with serve(config(("m", handler.base))) as c:
        ((state, error),) = states(c, "m").values()
        assert state is ServableState.ERROR
        shown = "<m>/1/assets.extra/warmup_requests.jsonl:3"  # relative to the model: no server paths shown
        assert path.relative_to(handler.base) == Path("1/assets.extra/warmup_requests.jsonl")
        assert shown in error, error  # the record is on line 3 (line 2 is blank)
        assert fragment in error, error
        # Line 1 ran; the bad line ran only if it got as far as the model; line 4 never ran.
        assert handler.calls() == [1] + [1] * reached_model

        status = c.get("/v1/models/m").json()["model_version_status"]
        assert status == [{"version": "1", "state": "END", "status": {"error_code": "UNKNOWN", "error_message": error}}]
        r = predict(c, "m", [ROW])
        assert r.status_code == 503, r.text
        assert shown in r.json()["error"]
        assert c.get("/v2/models/m/versions/1/ready").status_code != 200
        assert handler.calls() == [1] + [1] * reached_model  # the request never reached the model


def test_at_most_1000_records(tmp_path: Path) -> None:
    ok = handler_model(tmp_path, "ok")
    ok.write_warmup(lines([{"instances": [ROW]}] * 1000))
    too_many = handler_model(tmp_path, "too_many")
    path = too_many.write_warmup(lines([{"instances": [ROW]}] * 1001))
    with serve(config(("ok", ok.base), ("too_many", too_many.base))) as c:
        assert states(c, "ok")[1][0] is ServableState.AVAILABLE
        assert ok.calls() == [1] * 1000
        assert_serves(c, "ok")
        ((state, error),) = states(c, "too_many").values()
        assert state is ServableState.ERROR
        assert "exceeds the maximum (1000)" in error and "<too_many>/1/assets.extra/warmup_requests.jsonl" in error
        assert str(path) not in error
        assert too_many.calls() == []  # refused before replaying anything
        assert predict(c, "too_many", [ROW]).status_code == 503


def test_with_warmup_disabled_the_file_is_ignored(tmp_path: Path) -> None:
    handler = handler_model(tmp_path)
    handler.write_warmup([json.dumps(GOOD[0]), '{"instances": [[1, 2, 3]]', "not json at all"])
    with serve(config(("m", handler.base), enable_model_warmup=False)) as c:
        assert states(c, "m") == {1: (ServableState.AVAILABLE, "")}
        assert handler.calls() == []
        assert_serves(c)
        assert handler.calls() == [1]


def test_the_version_is_not_available_while_its_warmup_runs(tmp_path: Path) -> None:
    handler = handler_model(tmp_path)
    handler.write_warmup(lines(GOOD[:2]))
    handler.gate.touch()  # the first warmup call waits here
    try:
        with serve(config(("m", handler.base)), wait=False) as c:
            deadline = time.monotonic() + 15
            while handler.calls() != [1]:
                assert time.monotonic() < deadline, "warmup never reached the model"
                time.sleep(0.01)
            # Warmup is in progress (the model is inside its first warmup call).
            assert states(c, "m") == {1: (ServableState.LOADING, "")}
            r = predict(c, "m", [ROW])
            assert r.status_code == 503 and "not loaded yet" in r.json()["error"], r.text
            assert c.get("/v2/models/m/versions/1/ready").status_code != 200
            assert c.get("/v2/health/ready").status_code != 200
            assert c.get("/v1/models/m").json()["model_version_status"][0]["state"] == "LOADING"
            assert handler.calls() == [1]  # the refused request did not reach the model

            handler.gate.unlink()
            settle(c)
            assert states(c, "m") == {1: (ServableState.AVAILABLE, "")}
            assert handler.calls() == GOOD_ROWS[:2]
            assert_serves(c)
            assert c.get("/v2/health/ready").status_code == 200
    finally:
        handler.gate.unlink(missing_ok=True)
