"""The answers of SageMaker's supervised first-party algorithms (Linear Learner, Factorization Machines): each
record's ``score`` and, for classifiers, its ``predicted_label``, as JSON (``{"predictions": [{"score": 0.4,
"predicted_label": 0}]}``, the default), JSON lines, RecordIO-protobuf (the SDK's ``RecordDeserializer`` reads
``label["score"]`` and ``label["predicted_label"]``), or CSV (``predicted_label,score`` per record, the score alone
for a regressor; servekit's, for a batch transform whose output type is its input's)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from servekit.services.training.algorithms import instances
from servekit.serving.codecs import recordio_protobuf as rp


def _csv(p: dict[str, Any]) -> str:
    score = p["score"]
    values = [repr(float(v)) for v in (score if isinstance(score, list) else [score])]
    return ",".join(([str(p["predicted_label"])] if "predicted_label" in p else []) + values) + "\n"


def answer(predictions: Sequence[dict[str, Any]], accept: str, algorithm: str) -> tuple[bytes, str]:
    for kind in instances.kinds(accept):
        if kind in ("application/json", "*/*"):
            return json.dumps({"predictions": list(predictions)}).encode(), "application/json"
        if kind in ("application/jsonlines", "application/jsonl"):
            return "".join(json.dumps(p) + "\n" for p in predictions).encode(), "application/jsonlines"
        if kind == rp.CONTENT_TYPE:
            return rp.write_labels(predictions), rp.CONTENT_TYPE
        if kind == "text/csv":
            return "".join(_csv(p) for p in predictions).encode(), "text/csv"
    raise ValueError(
        f"accept type {accept!r} is not one {algorithm} answers: application/json, application/jsonlines, "
        f"{rp.CONTENT_TYPE}, text/csv"
    )
