"""k-means inference as SageMaker's ``kmeans`` container answers: RecordIO-protobuf (the SDK's ``RecordSerializer``),
CSV rows, or JSON (``{"instances": [{"features": [...]}]}``, also ``{"data": {"features": {"values": [...]}}}``) and
JSON lines in; each record's ``closest_cluster`` and ``distance_to_cluster`` out, as JSON
(``{"predictions": [...]}``, the default), JSON lines or RecordIO-protobuf (the SDK's ``RecordDeserializer``), or
CSV (``cluster,distance`` per record; servekit's, for a batch transform whose output type is its input's)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import numpy.typing as npt

from servekit.services.training.algorithms import instances, kmeans
from servekit.serving.codecs import recordio_protobuf as rp


def model_fn(model_dir: str) -> npt.NDArray[np.float64]:
    return kmeans.load(Path(model_dir))


def input_fn(body: bytes | str, content_type: str) -> npt.NDArray[np.float64]:
    """The records of a request (the toolkit hands text bodies over decoded, binary ones as bytes)."""
    return instances.read(body, content_type, "k-means")


def predict_fn(data: npt.NDArray[np.float64], centers: npt.NDArray[np.float64]) -> list[dict[str, float]]:
    nearest, distance = kmeans.assign(data, centers)
    return [
        {"closest_cluster": float(c), "distance_to_cluster": float(d)} for c, d in zip(nearest, distance, strict=True)
    ]


def output_fn(predictions: list[dict[str, float]], accept: str) -> tuple[bytes, str]:
    for kind in (a.split(";")[0].strip().lower() for a in (accept or "application/json").split(",")):
        if kind in ("application/json", "*/*"):
            return json.dumps({"predictions": predictions}).encode(), "application/json"
        if kind in ("application/jsonlines", "application/jsonl"):
            return "".join(json.dumps(p) + "\n" for p in predictions).encode(), "application/jsonlines"
        if kind == rp.CONTENT_TYPE:
            return rp.write_labels(predictions), rp.CONTENT_TYPE
        if kind == "text/csv":  # servekit's: a batch transform's output defaults to its input's type
            rows = (f"{int(p['closest_cluster'])},{p['distance_to_cluster']}\n" for p in predictions)
            return "".join(rows).encode(), "text/csv"
    raise ValueError(
        f"accept type {accept!r} is not one k-means answers: application/json, jsonlines, {rp.CONTENT_TYPE}"
    )
