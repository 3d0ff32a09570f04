"""The records of an inference request to a first-party algorithm, in the formats every one of them takes (AWS's
"Common Data Formats - Inference"): RecordIO-protobuf (the SDK's ``RecordSerializer``; dense or sparse tensors),
CSV rows, JSON (``{"instances": [...]}``, each ``{"features": [...]}``, ``{"data": {"features": {"values": [...]}}}``
or, sparse, ``{"data": {"features": {"keys": [...], "shape": [n], "values": [...]}}}``) and JSON lines of the same
instances. Every first-party inference script reads its requests with :func:`read`."""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import numpy.typing as npt

from servekit.serving.codecs import recordio_protobuf as rp

JSON_LINES = ("application/jsonlines", "application/jsonl", "application/x-jsonlines")
TAKES = f"{rp.CONTENT_TYPE}, text/csv, application/json, application/jsonlines"


def _sparse(found: dict[str, Any]) -> list[float]:
    keys, values, shape = found.get("keys"), found.get("values"), found.get("shape")
    if not isinstance(keys, list) or not isinstance(values, list) or len(keys) != len(values):
        raise ValueError('a sparse instance has "keys" and "values" of the same length')
    if not isinstance(shape, list) or len(shape) != 1:
        raise ValueError('a sparse instance has a "shape" of one number, its number of features')
    dense = np.zeros(int(shape[0]))
    at = np.asarray(keys, dtype=np.int64)
    if at.size and (at.min() < 0 or at.max() >= dense.size):
        raise ValueError(f"a sparse instance's keys run outside its shape {shape}")
    dense[at] = np.asarray(values, dtype=np.float64)
    return [float(v) for v in dense]


def features(instance: Any) -> list[float]:
    """One JSON instance's features."""
    if isinstance(instance, dict):
        found = instance.get("features")
        if found is None and isinstance(instance.get("data"), dict):
            found = instance["data"].get("features")
        if isinstance(found, dict):
            if "keys" in found:
                return _sparse(found)
            found = found.get("values")
        if isinstance(found, list):
            return [float(v) for v in found]
    if isinstance(instance, list):
        return [float(v) for v in instance]
    raise ValueError(
        'each instance is {"features": [numbers]}, {"data": {"features": {"values": [...]}}} or a sparse '
        '{"data": {"features": {"keys": [...], "shape": [n], "values": [...]}}}'
    )


def _rows(instances: list[Any]) -> npt.NDArray[np.float64]:
    rows = [features(i) for i in instances]
    if not rows:
        raise ValueError("the request holds no instance")
    if len({len(r) for r in rows}) != 1:
        raise ValueError("the instances have different numbers of features")
    return np.asarray(rows, dtype=np.float64)


def read(body: bytes | str, content_type: str, algorithm: str) -> npt.NDArray[np.float64]:
    """A request's records as rows (the toolkit hands text bodies over decoded, binary ones as bytes)."""
    kind = content_type.split(";")[0].strip().lower()
    if kind == rp.CONTENT_TYPE:
        return rp.read(body if isinstance(body, bytes) else body.encode("latin-1"))[0]
    text = body.decode("utf-8") if isinstance(body, bytes) else body
    try:
        if kind == "text/csv":
            return np.loadtxt(io.StringIO(text), delimiter=",", ndmin=2, dtype=np.float64)
        if kind == "application/json":
            doc = json.loads(text)
            instances = doc.get("instances") if isinstance(doc, dict) else doc
            if not isinstance(instances, list):
                raise ValueError('a JSON body is {"instances": [...]}')
            return _rows(instances)
        if kind in JSON_LINES:
            return _rows([json.loads(line) for line in text.splitlines() if line.strip()])
    except (IndexError, TypeError) as exc:  # a value that is no number, a row of another shape: the request's fault
        raise ValueError(f"the {kind} body is not one {algorithm} reads: {exc}") from None
    raise ValueError(f"content type {content_type!r} is not one {algorithm} takes: {TAKES}")


def accepted(accept: str) -> list[tuple[str, dict[str, str]]]:
    """The Accept header's types in order, each with its parameters (``application/json; verbose=true``)."""
    out = []
    for item in (accept or "application/json").split(","):
        kind, *params = (p.strip() for p in item.split(";"))
        pairs = (p.split("=", 1) for p in params if "=" in p)
        out.append((kind.lower(), {k.strip().lower(): v.strip().strip('"').lower() for k, v in pairs}))
    return out


def kinds(accept: str) -> list[str]:
    """The Accept header's media types in order (``application/json`` for none)."""
    return [kind for kind, _ in accepted(accept)]
