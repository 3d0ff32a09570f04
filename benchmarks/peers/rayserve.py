"""Ray Serve serving the ``tiny`` ONNX file through a deployment that calls onnxruntime.

``rayserve_app.py`` starts a private local Ray instance (its temp dir under the run's folder, so it never joins
or disturbs another Ray on the machine), Serve's HTTP proxy on 127.0.0.1 and one replica. Two variants: one
onnxruntime call per request, and ``@serve.batch`` (max_batch_size 64, batch_wait_timeout_s 1 ms, servekit's
tiny batching settings). ``max_ongoing_requests`` 64 so that c=64 reaches the replica; access log off. The
request body is servekit's own V1 ``{"instances": [row]}`` POSTed to ``/``.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import requests

from peers import PeerError, ensure_venv, free_port, process

# Installed and measured here: ray 2.60.0 is the latest release (the system Python's ray has no serve extras).
REQUIREMENTS = ["ray[serve]==2.60.0", "onnxruntime==1.32.0"]
PACKAGES = ["ray", "onnxruntime", "numpy", "uvicorn", "starlette", "fastapi"]
VARIANTS = ("", "serve.batch")
SETUP = (
    "Serve deployment calling onnxruntime on the same model.onnx; servekit's V1 body to /; 1 replica,"
    " max_ongoing_requests 64, private local Ray, access log off; serve.batch: max_batch_size 64,"
    " batch_wait_timeout_s 1 ms"
)
HERE = Path(__file__).resolve().parent


def install(log: Path) -> Path:
    return ensure_venv("rayserve", REQUIREMENTS, log)


def prepare(python: Path, model_onnx: Path, dest: Path, variant: str) -> Path:
    if variant not in VARIANTS:
        raise PeerError(f"unknown rayserve variant {variant!r}")
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(model_onnx, dest / "model.onnx")
    shutil.copyfile(HERE / "rayserve_app.py", dest / "rayserve_app.py")
    (dest / "variant").write_text("batching" if variant else "plain")
    return dest


@contextlib.contextmanager
def serve(python: Path, prepared: Path, log: Path) -> Iterator[str]:
    port = free_port()
    # Ray's session dir holds unix sockets whose paths must stay under 107 bytes: a short dir in /tmp.
    temp = Path(tempfile.mkdtemp(prefix="rsk-"))
    cmd = [str(python), "rayserve_app.py", str(port), (prepared / "variant").read_text(), str(temp)]
    env = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_ADDRESS": ""}

    def ready() -> bool:
        return f"on 127.0.0.1:{port}" in log.read_text(errors="replace") and (
            requests.get(f"http://127.0.0.1:{port}/-/healthz", timeout=2).status_code == 200
        )

    try:
        with process(cmd, log, ready, timeout=240, cwd=prepared, env=env):
            yield f"http://127.0.0.1:{port}/"
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def payload(row: list[float]) -> str:
    """servekit's own one-row V1 body; the deployment reads ``instances``."""
    return json.dumps({"instances": [row]})
