"""PCA inference as SageMaker's ``pca`` container answers: RecordIO-protobuf (the SDK's ``RecordSerializer``), CSV
rows, JSON or JSON lines in (instances.py); each record's ``projection`` out, as JSON
(``{"projections": [{"projection": [...]}, ...]}``, the default), JSON lines or RecordIO-protobuf (the SDK's
``RecordDeserializer``: ``label["projection"]``), or CSV (a row of the projection per record; servekit's, for a batch
transform whose output type is its input's)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import numpy.typing as npt

from servekit.services.training.algorithms import instances, pca
from servekit.serving.codecs import recordio_protobuf as rp


def model_fn(model_dir: str) -> pca.Model:
    return pca.load(Path(model_dir))


def input_fn(body: bytes | str, content_type: str) -> npt.NDArray[np.float64]:
    return instances.read(body, content_type, "PCA")


def predict_fn(data: npt.NDArray[np.float64], model: pca.Model) -> list[list[float]]:
    return [[float(v) for v in row] for row in pca.project(data, model)]


def output_fn(projections: list[list[float]], accept: str) -> tuple[bytes, str]:
    for kind in instances.kinds(accept):
        if kind in ("application/json", "*/*"):
            body = {"projections": [{"projection": p} for p in projections]}
            return json.dumps(body).encode(), "application/json"
        if kind in ("application/jsonlines", "application/jsonl"):
            return "".join(json.dumps({"projection": p}) + "\n" for p in projections).encode(), "application/jsonlines"
        if kind == rp.CONTENT_TYPE:
            return rp.write_labels([{"projection": p} for p in projections]), rp.CONTENT_TYPE
        if kind == "text/csv":  # servekit's: a batch transform's output defaults to its input's type
            return "".join(",".join(repr(v) for v in p) + "\n" for p in projections).encode(), "text/csv"
    raise ValueError(f"accept type {accept!r} is not one PCA answers: application/json, jsonlines, {rp.CONTENT_TYPE}")
