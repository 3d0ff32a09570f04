"""Seldon MLServer serving the ``tiny`` ONNX file through a minimal custom onnxruntime runtime.

MLServer has no official ONNX runtime, so ``mlserver_onnx_runtime.py`` (30 lines) runs the very same
model.onnx that servekit serves. Two variants: MLServer's defaults (no batching) and adaptive batching with
``max_batch_size`` 64 / ``max_batch_time`` 1 ms (servekit's tiny batching settings). Everything else is
MLServer's default (``parallel_workers`` 1: inference in one worker process), except ``debug`` off so that
no access log is written per request. HTTP, gRPC and metrics ports all bind 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import requests

from peers import PeerError, ensure_venv, free_port, process, tail

# Installed and measured here: mlserver 1.7.1 is the latest release. uvloop >= 0.22 breaks its inference worker
# ("There is no current event loop", SeldonIO/MLServer#2286), so uvloop stays at 0.21.0.
REQUIREMENTS = ["mlserver==1.7.1", "onnxruntime==1.32.0", "uvloop==0.21.0"]
PACKAGES = ["mlserver", "onnxruntime", "numpy", "uvloop", "uvicorn", "fastapi"]
VARIANTS = ("", "adaptive batching")
SETUP = (
    "custom onnxruntime runtime on the same model.onnx; V2 JSON to /v2/models/tiny/infer; defaults"
    " (parallel_workers 1, debug off); adaptive batching: max_batch_size 64, max_batch_time 1 ms"
)
HERE = Path(__file__).resolve().parent


def install(log: Path) -> Path:
    return ensure_venv("mlserver", REQUIREMENTS, log)


def prepare(python: Path, model_onnx: Path, dest: Path, variant: str) -> Path:
    """``dest`` holds settings.json (ports filled in at start), model-settings.json, model.onnx, the runtime."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(model_onnx, dest / "model.onnx")
    shutil.copyfile(HERE / "mlserver_onnx_runtime.py", dest / "mlserver_onnx_runtime.py")
    settings = {
        "name": "tiny",
        "implementation": "mlserver_onnx_runtime.OnnxModel",
        "parameters": {"uri": "./model.onnx", "version": "1"},
    }
    if variant == "adaptive batching":
        settings |= {"max_batch_size": 64, "max_batch_time": 0.001}
    elif variant:
        raise PeerError(f"unknown mlserver variant {variant!r}")
    (dest / "model-settings.json").write_text(json.dumps(settings, indent=2))
    return dest


@contextlib.contextmanager
def serve(python: Path, prepared: Path, log: Path) -> Iterator[str]:
    http, grpc, metrics = free_port(), free_port(), free_port()
    (prepared / "settings.json").write_text(
        json.dumps(
            {
                "host": "127.0.0.1",
                "http_port": http,
                "grpc_port": grpc,
                "metrics_port": metrics,
                "debug": False,
            },
            indent=2,
        )
    )
    base = f"http://127.0.0.1:{http}"

    def ready() -> bool:
        if "Couldn't load model" in log.read_text(errors="replace"):  # MLServer keeps running without it
            raise PeerError(f"MLServer could not load the model; log {log}:\n{tail(log)}")
        return requests.get(f"{base}/v2/models/tiny/ready", timeout=2).status_code == 200

    mlserver = python.parent / "mlserver"
    with process([str(mlserver), "start", str(prepared)], log, ready, timeout=180, cwd=prepared):
        yield f"{base}/v2/models/tiny/infer"


def payload(row: list[float]) -> str:
    """A one-row V2 request (the same row as servekit's ``{"instances": [row]}``)."""
    return json.dumps({"inputs": [{"name": "X", "shape": [1, len(row)], "datatype": "FP32", "data": row}]})
