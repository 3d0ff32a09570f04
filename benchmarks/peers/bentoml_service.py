"""A BentoML service that runs the ``tiny`` ONNX file with onnxruntime (BentoML 1.4's ``@bentoml.service`` API).

Copied next to model.onnx by peers/bentoml.py and served with ``bentoml serve bentoml_service:<Class>``; it runs
inside the BentoML venv, not in servekit's. The API is named ``predict`` and takes ``instances``, so servekit's
own V1 body ``{"instances": [row]}`` POSTed to /predict is a valid request. Two services:

- ``Tiny``: one onnxruntime call per request (a sync API: BentoML runs it on its thread pool);
- ``TinyBatching``: BentoML's adaptive batching (``batchable=True``, ``max_batch_size`` 64), which concatenates
  the ``instances`` arrays of concurrent requests along axis 0 and splits the answer back.

Both are BentoML defaults otherwise (one API worker process) except the access log, which is off as it is for
servekit and the other peers.
"""

from pathlib import Path

import bentoml
import numpy as np
import onnxruntime as ort

MODEL = Path(__file__).resolve().with_name("model.onnx")
QUIET = {"access": {"enabled": False}}


def _session() -> tuple[ort.InferenceSession, str]:
    session = ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])
    return session, session.get_inputs()[0].name


@bentoml.service(logging=QUIET)
class Tiny:
    def __init__(self) -> None:
        self.session, self.input = _session()

    @bentoml.api
    def predict(self, instances: np.ndarray) -> np.ndarray:
        return self.session.run(None, {self.input: instances.astype(np.float32, copy=False)})[0]


@bentoml.service(logging=QUIET)
class TinyBatching:
    def __init__(self) -> None:
        self.session, self.input = _session()

    @bentoml.api(batchable=True, max_batch_size=64)
    def predict(self, instances: np.ndarray) -> np.ndarray:
        return self.session.run(None, {self.input: instances.astype(np.float32, copy=False)})[0]
