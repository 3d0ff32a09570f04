"""One captured exchange in SageMaker's data-capture JSON shape: the one definition of the record format
(``servekit.testing.capture_files`` builds its fixtures with it; ``servekit.services.monitoring`` reads it).

Tensor models are captured as the named tensors the model was given and gave back, whatever protocol carried
them: ``application/json`` KServe V2 documents (``{"inputs": [{"name", "datatype", "shape", "data"}]}`` and
``{"outputs": [...]}``). Models that decode their own bodies (``inference.py``) are captured byte for byte."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from servekit.serving.codecs.json import dumps
from servekit.types import v2_datatype

TENSOR_CONTENT_TYPE = "application/json"

_TEXT_TYPES = {"application/json": "JSON", "application/jsonlines": "JSON", "text/csv": "CSV"}


def _payload(content_type: str, body: bytes, mode: str) -> dict[str, Any]:
    media = content_type.split(";", 1)[0].strip().lower()
    encoding = _TEXT_TYPES.get(media)
    if encoding is not None:
        try:
            data = body.decode("utf-8")
        except UnicodeDecodeError:
            encoding = None
    if encoding is None:
        encoding, data = "BASE64", base64.b64encode(body).decode("ascii")
    return {"observedContentType": content_type, "mode": mode, "data": data, "encoding": encoding}


def capture_record(
    when: datetime,
    input_type: str | None,
    input_body: bytes | None,
    output_type: str | None,
    output_body: bytes | None,
    event_id: str | None = None,
    inference_id: str | None = None,
) -> dict[str, Any]:
    data: dict[str, Any] = {}
    if input_body is not None and input_type is not None:
        data["endpointInput"] = _payload(input_type, input_body, "INPUT")
    if output_body is not None and output_type is not None:
        data["endpointOutput"] = _payload(output_type, output_body, "OUTPUT")
    stamp = when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    meta: dict[str, Any] = {"eventId": event_id or str(uuid.uuid4())}
    if inference_id:  # the caller's InferenceId (X-Amzn-SageMaker-Inference-Id), to join labels to predictions
        meta["inferenceId"] = inference_id
    meta["inferenceTime"] = stamp
    return {"captureData": data, "eventMetadata": meta, "eventVersion": "0"}


def read_record(line: bytes | str) -> tuple[str, dict[str, Any] | None]:
    """``(inferenceTime text, endpointInput payload or None)`` of one record line; ValueError if it is none."""
    try:
        record = orjson.loads(line)
        when = record["eventMetadata"]["inferenceTime"]
        payload = record["captureData"].get("endpointInput")
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a capture record: {exc}") from None
    if not isinstance(when, str) or not (payload is None or isinstance(payload, dict)):
        raise ValueError("not a capture record: inferenceTime must be text and endpointInput an object")
    return when, payload


def partition(model: str, version: int, when: datetime, prefix: str | None = None) -> str:
    """``<model>/<version>/yyyy/mm/dd/hh``: SageMaker's hourly layout under the destination; with ``prefix``
    (an endpoint's ``<endpoint>/<variant>``), ``<prefix>/yyyy/mm/dd/hh`` instead."""
    t = when.astimezone(UTC)
    return f"{prefix or f'{model}/{version}'}/{t:%Y/%m/%d/%H}"


def tensors_body(key: str, tensors: Mapping[str, npt.NDArray[Any]]) -> bytes:
    """``{key: [V2 tensor, ...]}`` as JSON bytes (``key`` is "inputs" or "outputs")."""
    entries = []
    for name, arr in tensors.items():
        arr = np.asarray(arr)
        datatype = v2_datatype(arr.dtype)
        if datatype == "BYTES":
            data: Any = [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in arr.ravel().tolist()]
        else:
            data = np.ascontiguousarray(arr).ravel()
        entries.append({"name": name, "datatype": datatype, "shape": list(arr.shape), "data": data})
    return dumps({key: entries})
