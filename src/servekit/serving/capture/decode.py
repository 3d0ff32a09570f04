"""Decoding captured bodies into rows: the one protocol decoder that readers of capture use.

A SageMaker-layout record is one JSON line: ``captureData.endpointInput`` / ``endpointOutput`` hold a body as
``data`` with its ``encoding`` (``JSON``, ``CSV`` or ``BASE64``) and ``observedContentType``;
``eventMetadata.inferenceTime`` says when. What servekit captures for tensor models is KServe V2 JSON
(``{"inputs": [{"name", "shape", "data"}]}``, ``{"outputs": [...]}``); bodies captured byte for byte
(``inference.py`` models, or capture written by SageMaker itself) may be a TF Serving body (``{"instances": [...]}``
row format, ``{"inputs": ...}`` columnar format, ``{"predictions": [...]}``), a plain JSON list of rows, one JSON
object (one row), JSON lines, or CSV rows. Rows are lists (positional values) or objects (named values).
"""

from __future__ import annotations

import base64
import csv
import io
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

import orjson

from servekit.serving.capture.record import read_record

Row = list[Any] | dict[str, Any]


class UndecodableRecord(ValueError):
    """The record or its body could not be turned into rows; readers count and skip it."""


def parse_time(text: str) -> float:
    """ISO 8601 (``2026-11-30T10:00:00Z``; no zone means UTC) → epoch seconds."""
    try:
        dt = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(f"bad time {text!r}: expected ISO 8601 such as 2026-11-30T10:00:00Z") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


# A capture file repeats the same few inference times (one per request, many rows each): parse each once.
inference_time = lru_cache(maxsize=65536)(parse_time)


def decode_record(line: bytes | str) -> tuple[float, list[Row]] | None:
    """``(epoch seconds, input rows)`` of one capture line; ``None`` for a record without an input (output-only)."""
    try:
        stamp, payload = read_record(line)
        when = inference_time(stamp)
    except ValueError as exc:
        raise UndecodableRecord(str(exc)) from None
    if payload is None:
        return None
    return when, payload_rows(payload)


def payload_rows(payload: dict[str, Any]) -> list[Row]:
    """The rows of one captured body (``endpointInput`` or ``endpointOutput``)."""
    encoding = str(payload.get("encoding", "JSON")).upper()
    content_type = str(payload.get("observedContentType", "")).split(";", 1)[0].strip().lower()
    data = payload.get("data", "")
    if encoding == "BASE64":
        try:
            raw = base64.b64decode(data, validate=True)
        except ValueError as exc:
            raise UndecodableRecord(f"BASE64 payload does not decode: {exc}") from None
        return body_rows(raw, content_type)
    if encoding == "CSV":
        return csv_rows(str(data))
    if encoding == "JSON":
        if "jsonlines" in content_type:
            return [r for line in str(data).splitlines() if line.strip() for r in json_rows(_loads(line))]
        return json_rows(_loads(data))
    raise UndecodableRecord(f"unknown encoding {encoding!r}")


def body_rows(raw: bytes, content_type: str) -> list[Row]:
    """The rows of a body as it was sent (CSV when its content type says so, else JSON or JSON lines)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UndecodableRecord(f"payload is not UTF-8 text: {exc}") from None
    media = content_type.split(";", 1)[0].strip().lower()
    if "csv" in media:
        return csv_rows(text)
    if "jsonlines" in media:
        return [r for line in text.splitlines() if line.strip() for r in json_rows(_loads(line))]
    return json_rows(_loads(text))


def _loads(data: Any) -> Any:
    try:
        return orjson.loads(data)
    except (orjson.JSONDecodeError, TypeError) as exc:
        raise UndecodableRecord(f"JSON payload does not parse: {exc}") from None


def csv_rows(text: str) -> list[Row]:
    return [list(r) for r in csv.reader(io.StringIO(text)) if r]


def json_rows(body: Any) -> list[Row]:
    if isinstance(body, dict):
        for key in ("instances", "predictions"):  # TF Serving's row format, request and answer
            if key in body:
                return _rows(body[key])
        for key in ("inputs", "outputs"):
            if key in body:
                tensors = body[key]
                if isinstance(tensors, list) and tensors and all(isinstance(t, dict) and "data" in t for t in tensors):
                    return _v2_rows(tensors)
                if isinstance(tensors, dict):
                    return _columnar_rows(tensors)
                return _rows(tensors)
        return [body]
    if isinstance(body, list):
        return _rows(body)
    return [[body]]


def _rows(items: Any) -> list[Row]:
    if not isinstance(items, list):
        raise UndecodableRecord("instances/inputs must be a list")
    return [item if isinstance(item, list | dict) else [item] for item in items]


def _columnar_rows(columns: dict[str, Any]) -> list[Row]:
    """TF Serving columnar ``{"inputs": {"a": [..], "b": [..]}}``: one row per index of the lists."""
    lengths = {len(v) for v in columns.values() if isinstance(v, list)}
    if len(lengths) != 1 or not all(isinstance(v, list) for v in columns.values()):
        raise UndecodableRecord("columnar inputs must be lists of one length")
    names = list(columns)
    return [dict(zip(names, values, strict=True)) for values in zip(*columns.values(), strict=True)]


def _v2_rows(tensors: Sequence[dict[str, Any]]) -> list[Row]:
    """KServe V2 tensors: one [N, F] tensor gives positional rows; several tensors give named rows, a [N] / [N, 1]
    tensor one value per row and a wider one a list per row (e.g. class probabilities)."""
    shaped = []
    for t in tensors:
        shape = [int(d) for d in t.get("shape", [len(t["data"])])]
        data = _flatten(t["data"])
        width = 1
        for d in shape[1:]:
            width *= d
        if not shape or shape[0] * width != len(data):
            raise UndecodableRecord(f"V2 tensor {t.get('name')!r}: data does not match shape {shape}")
        shaped.append((str(t.get("name", "")), width, data, shape[0]))
    if len(shaped) == 1 and shaped[0][1] > 1:
        _, width, data, n = shaped[0]
        return [data[i * width : (i + 1) * width] for i in range(n)]
    if len({n for *_, n in shaped}) != 1:
        raise UndecodableRecord("V2 tensors: several tensors must hold the same number of rows")
    n = shaped[0][3]
    return [
        {name: data[i] if width == 1 else data[i * width : (i + 1) * width] for name, width, data, _ in shaped}
        for i in range(n)
    ]


def _flatten(data: Any) -> list[Any]:
    if not isinstance(data, list):
        return [data]
    out: list[Any] = []
    for item in data:
        out.extend(_flatten(item))
    return out
