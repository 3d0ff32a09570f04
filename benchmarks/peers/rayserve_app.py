"""A Ray Serve deployment that runs the ``tiny`` ONNX file with onnxruntime, and its launcher.

Copied next to model.onnx by peers/rayserve.py and run with the Ray Serve venv's python
(``python rayserve_app.py PORT VARIANT``): it starts a private local Ray instance (``ray.init``; no cluster is
joined), starts Serve's HTTP proxy on 127.0.0.1:PORT, deploys the app at ``/`` and waits for SIGINT/SIGTERM.
Two deployments:

- ``Tiny``: one onnxruntime call per request;
- ``TinyBatching``: the same behind ``@serve.batch`` (``max_batch_size`` 64, ``batch_wait_timeout_s`` 1 ms,
  servekit's tiny batching settings), Ray Serve's fast path for small requests.

``max_ongoing_requests`` is 64 (the default, 5, would queue most of c=64's requests in the proxy); one replica;
access log off as it is for servekit and the other peers. The body is servekit's V1 ``{"instances": [row]}``.
"""

import signal
import sys
import threading
from pathlib import Path

import numpy as np
import onnxruntime as ort
import ray
from ray import serve
from ray.serve.config import HTTPOptions
from ray.serve.schema import LoggingConfig
from starlette.requests import Request

MODEL = Path(__file__).resolve().with_name("model.onnx")
MAX_ONGOING = 64
QUIET = LoggingConfig(enable_access_log=False, log_level="WARNING")


def _session() -> tuple[ort.InferenceSession, str]:
    session = ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])
    return session, session.get_inputs()[0].name


@serve.deployment(max_ongoing_requests=MAX_ONGOING, logging_config=QUIET)
class Tiny:
    def __init__(self) -> None:
        self.session, self.input = _session()

    async def __call__(self, request: Request) -> dict[str, list[list[float]]]:
        x = np.asarray((await request.json())["instances"], dtype=np.float32)
        return {"predictions": self.session.run(None, {self.input: x})[0].tolist()}


@serve.deployment(max_ongoing_requests=MAX_ONGOING, logging_config=QUIET)
class TinyBatching:
    def __init__(self) -> None:
        self.session, self.input = _session()

    @serve.batch(max_batch_size=64, batch_wait_timeout_s=0.001)
    async def run(self, xs: list[np.ndarray]) -> list[list[list[float]]]:
        y = self.session.run(None, {self.input: np.concatenate(xs)})[0]
        bounds = np.cumsum([len(x) for x in xs])[:-1]
        return [part.tolist() for part in np.split(y, bounds)]

    async def __call__(self, request: Request) -> dict[str, list[list[float]]]:
        x = np.asarray((await request.json())["instances"], dtype=np.float32)
        return {"predictions": await self.run(x)}


def main() -> None:
    port, variant = int(sys.argv[1]), sys.argv[2]
    deployment = {"plain": Tiny, "batching": TinyBatching}[variant]
    ray.init(include_dashboard=False, _temp_dir=sys.argv[3] if len(sys.argv) > 3 else None)
    serve.start(http_options=HTTPOptions(host="127.0.0.1", port=port), logging_config=QUIET)
    serve.run(deployment.bind(), name="tiny", route_prefix="/")
    print(f"serving {variant} on 127.0.0.1:{port}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    serve.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main()
