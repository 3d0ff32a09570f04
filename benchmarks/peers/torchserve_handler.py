"""A TorchServe handler that runs the archived ONNX file with onnxruntime, one session call per batch.

Archived into tiny.mar by peers/torchserve.py (torch-model-archiver ``--handler``); runs in the TorchServe
venv's worker. TorchServe calls ``handle(None, context)`` once to initialise, then ``handle(batch, context)``
with up to ``batch_size`` requests; each body is ``{"instances": [[...], ...]}`` (servekit's V1 body) and
each answer ``{"predictions": [...]}`` with the probabilities (the last ONNX output).
"""

import json
import os
import sys
import traceback

import numpy as np
import onnxruntime as ort

_session = None
_input = ""


def _initialise(context):
    global _session, _input
    props = context.system_properties
    path = os.path.join(props["model_dir"], context.manifest["model"]["serializedFile"])
    _session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    _input = _session.get_inputs()[0].name


def handle(data, context):
    if _session is None:
        try:
            _initialise(context)
        except Exception:
            # the worker logs its own errors at INFO, which the quiet log config drops; stderr is logged at WARN
            traceback.print_exc(file=sys.stderr)
            raise
    if data is None:
        return None
    rows, counts = [], []
    for request in data:
        body = request.get("body") if request.get("body") is not None else request.get("data")
        if isinstance(body, (bytes, bytearray, str)):
            body = json.loads(body)
        instances = body["instances"]
        rows.extend(instances)
        counts.append(len(instances))
    probabilities = _session.run(None, {_input: np.asarray(rows, dtype=np.float32)})[-1].tolist()
    out, start = [], 0
    for n in counts:
        out.append({"predictions": probabilities[start : start + n]})
        start += n
    return out
