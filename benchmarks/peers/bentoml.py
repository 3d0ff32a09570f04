"""BentoML serving the ``tiny`` ONNX file through a BentoML service that calls onnxruntime.

``bentoml_service.py`` (a ``@bentoml.service`` class per variant) runs the very same model.onnx. Two variants:
one onnxruntime call per request, and BentoML's adaptive batching (``@bentoml.api(batchable=True,
max_batch_size=64)``; BentoML chooses the wait itself from its latency model, there is no fixed batch timeout to
set). One API worker process (BentoML's default), access log off; HTTP binds 127.0.0.1. The request body is
servekit's own V1 ``{"instances": [row]}`` POSTed to /predict (the API's parameter is named ``instances``).
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import requests

from peers import PeerError, ensure_venv, free_port, process

# Installed and measured here: bentoml 1.4.40 is the latest release.
REQUIREMENTS = ["bentoml==1.4.40", "onnxruntime==1.32.0"]
PACKAGES = ["bentoml", "onnxruntime", "numpy", "uvicorn", "starlette"]
VARIANTS = ("", "adaptive batching")
SERVICES = {"": "Tiny", "adaptive batching": "TinyBatching"}
SETUP = (
    "@bentoml.service calling onnxruntime on the same model.onnx; servekit's V1 body to /predict; 1 API worker,"
    " access log off; adaptive batching: batchable=True, max_batch_size 64 (BentoML picks the wait)"
)
HERE = Path(__file__).resolve().parent


def install(log: Path) -> Path:
    return ensure_venv("bentoml", REQUIREMENTS, log)


def prepare(python: Path, model_onnx: Path, dest: Path, variant: str) -> Path:
    """``dest`` holds model.onnx and bentoml_service.py; the variant picks the service class at start."""
    if variant not in SERVICES:
        raise PeerError(f"unknown bentoml variant {variant!r}")
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(model_onnx, dest / "model.onnx")
    shutil.copyfile(HERE / "bentoml_service.py", dest / "bentoml_service.py")
    (dest / "variant").write_text(SERVICES[variant])
    return dest


@contextlib.contextmanager
def serve(python: Path, prepared: Path, log: Path) -> Iterator[str]:
    port = free_port()
    service = f"bentoml_service:{(prepared / 'variant').read_text()}"
    cmd = [str(python.parent / "bentoml"), "serve", service, "--host", "127.0.0.1", "--port", str(port)]
    # BentoML's home (models store, tracking id) stays private to this run; no usage tracking calls out.
    env = {"BENTOML_HOME": str(prepared / "bentoml-home"), "BENTOML_DO_NOT_TRACK": "True"}

    def ready() -> bool:
        return requests.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200

    with process(cmd, log, ready, timeout=180, cwd=prepared, env=env):
        yield f"http://127.0.0.1:{port}/predict"


def payload(row: list[float]) -> str:
    """servekit's own one-row V1 body; the API's parameter is ``instances``."""
    return json.dumps({"instances": [row]})
