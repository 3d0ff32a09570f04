"""k-NN inference as SageMaker's ``knn`` container answers: rows as RecordIO-protobuf (the SDK's
``RecordSerializer``), CSV, JSON or JSON lines in (:mod:`..instances`); each row's ``predicted_label`` out, as JSON
(``{"predictions": [{"predicted_label": 2.0}]}``, the default), JSON lines, RecordIO-protobuf (the SDK's
``RecordDeserializer``: ``label["predicted_label"]``) or CSV (a label per line; servekit's, for a batch transform
whose output type is its input's). With ``verbose=true`` on the Accept type (``application/json; verbose=true``)
each prediction also holds its ``k`` neighbours' ``distances`` (nearest first) and their ``labels``, as AWS's
verbose JSON and RecordIO-protobuf answers do."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from servekit.services.training.algorithms import instances, knn
from servekit.serving.codecs import recordio_protobuf as rp


def model_fn(model_dir: str) -> knn.Model:
    return knn.load(Path(model_dir))


def input_fn(body: bytes | str, content_type: str) -> npt.NDArray[np.float64]:
    return instances.read(body, content_type, "k-NN")


def predict_fn(data: npt.NDArray[np.float64], model: knn.Model) -> list[dict[str, Any]]:
    """Each row's prediction with its neighbours (output_fn drops them unless the answer is verbose)."""
    predicted, labels, distances = knn.predict(data, model)
    return [
        {"predicted_label": float(p), "distances": [float(v) for v in d], "labels": [float(v) for v in lab]}
        for p, d, lab in zip(predicted, distances, labels, strict=True)
    ]


def output_fn(predictions: list[dict[str, Any]], accept: str) -> tuple[bytes, str]:
    for kind, params in instances.accepted(accept):
        shown = (
            predictions
            if params.get("verbose") == "true"
            else [{"predicted_label": p["predicted_label"]} for p in predictions]
        )
        if kind in ("application/json", "*/*"):
            return json.dumps({"predictions": shown}).encode(), "application/json"
        if kind in instances.JSON_LINES:
            return "".join(json.dumps(p) + "\n" for p in shown).encode(), "application/jsonlines"
        if kind == rp.CONTENT_TYPE:
            return rp.write_labels(shown), rp.CONTENT_TYPE
        if kind == "text/csv":  # servekit's: a batch transform's output defaults to its input's type
            return "".join(f"{p['predicted_label']}\n" for p in shown).encode(), "text/csv"
    raise ValueError(f"accept type {accept!r} is not one k-NN answers: application/json, jsonlines, {rp.CONTENT_TYPE}")
