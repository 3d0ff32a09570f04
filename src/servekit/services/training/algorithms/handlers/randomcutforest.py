"""Random Cut Forest inference as SageMaker's ``randomcutforest`` container answers: RecordIO-protobuf (the SDK's
``RecordSerializer``), CSV rows, dense or sparse JSON, or JSON lines in (instances.py); each record's
anomaly ``score`` out, as JSON (``{"scores": [{"score": 1.2}, ...]}``, the default), JSON lines or RecordIO-protobuf
(the SDK's ``RecordDeserializer``: ``label["score"]``, one float32), or CSV (a score per line; servekit's, for a
batch transform whose output type is its input's)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import numpy.typing as npt

from servekit.services.training.algorithms import instances
from servekit.services.training.algorithms import randomcutforest as rcf
from servekit.serving.codecs import recordio_protobuf as rp


def model_fn(model_dir: str) -> rcf.Forest:
    return rcf.load(Path(model_dir))


def input_fn(body: bytes | str, content_type: str) -> npt.NDArray[np.float64]:
    return instances.read(body, content_type, "Random Cut Forest")


def predict_fn(data: npt.NDArray[np.float64], forest: rcf.Forest) -> list[float]:
    return [float(s) for s in rcf.score(data, forest)]


def output_fn(scores: list[float], accept: str) -> tuple[bytes, str]:
    for kind in instances.kinds(accept):
        if kind in ("application/json", "*/*"):
            return json.dumps({"scores": [{"score": s} for s in scores]}).encode(), "application/json"
        if kind in ("application/jsonlines", "application/jsonl"):
            return "".join(json.dumps({"score": s}) + "\n" for s in scores).encode(), "application/jsonlines"
        if kind == rp.CONTENT_TYPE:
            return rp.write_labels([{"score": s} for s in scores]), rp.CONTENT_TYPE
        if kind == "text/csv":  # servekit's: a batch transform's output defaults to its input's type
            return "".join(f"{s!r}\n" for s in scores).encode(), "text/csv"
    raise ValueError(
        f"accept type {accept!r} is not one Random Cut Forest answers: application/json, jsonlines, {rp.CONTENT_TYPE}"
    )
