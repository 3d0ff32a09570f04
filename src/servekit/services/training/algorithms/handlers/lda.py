"""LDA inference as SageMaker's ``lda`` container answers: documents (rows of word counts) as RecordIO-protobuf (the
SDK's ``RecordSerializer``, dense or sparse), CSV rows, JSON or JSON lines in (:mod:`..instances`); each document's
``topic_mixture`` out, as JSON (``{"predictions": [{"topic_mixture": [...]}]}``, the default), JSON lines or
RecordIO-protobuf (the SDK's ``RecordDeserializer``: ``label["topic_mixture"]``), or CSV (a row of weights per
document; servekit's, for a batch transform whose output type is its input's)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from servekit.services.training.algorithms import instances, lda
from servekit.serving.codecs import recordio_protobuf as rp


def model_fn(model_dir: str) -> lda.Model:
    return lda.load(Path(model_dir))


def input_fn(body: bytes | str, content_type: str) -> npt.NDArray[np.float64]:
    return instances.read(body, content_type, "LDA")


def predict_fn(data: npt.NDArray[np.float64], model: lda.Model) -> list[dict[str, list[float]]]:
    return [{"topic_mixture": [float(v) for v in row]} for row in lda.topic_mixture(data, model)]


def output_fn(predictions: list[dict[str, Any]], accept: str) -> tuple[bytes, str]:
    for kind, _ in instances.accepted(accept):
        if kind in ("application/json", "*/*"):
            return json.dumps({"predictions": predictions}).encode(), "application/json"
        if kind in instances.JSON_LINES:
            return "".join(json.dumps(p) + "\n" for p in predictions).encode(), "application/jsonlines"
        if kind == rp.CONTENT_TYPE:
            return rp.write_labels(predictions), rp.CONTENT_TYPE
        if kind == "text/csv":  # servekit's: a batch transform's output defaults to its input's type
            rows = (",".join(repr(v) for v in p["topic_mixture"]) + "\n" for p in predictions)
            return "".join(rows).encode(), "text/csv"
    raise ValueError(f"accept type {accept!r} is not one LDA answers: application/json, jsonlines, {rp.CONTENT_TYPE}")
