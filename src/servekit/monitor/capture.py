"""Decoding SageMaker data-capture records into feature rows.

A record is one JSON line: ``captureData.endpointInput`` holds the request body as ``data`` with its
``encoding`` (``JSON``, ``CSV`` or ``BASE64``) and ``observedContentType``; ``eventMetadata.inferenceTime`` says
when. The body is what the client sent: a TF Serving body (``{"instances": [...]}`` row format or
``{"inputs": ...}`` columnar format), a KServe V2 body (``{"inputs": [{"name", "shape", "data"}]}``), a plain JSON
list of rows, one JSON object (one row), JSON lines, or CSV rows. Rows are lists (positional features) or
objects (named features). Only the input is monitored.
"""

from __future__ import annotations

import base64
import csv
import io
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import orjson

from servekit.capture.record import read_record
from servekit.monitor.windows import parse_time

Row = list[Any] | dict[str, Any]


class UndecodableRecord(ValueError):
    """The record or its body could not be turned into rows; the run counts and skips it."""


@lru_cache(maxsize=65536)
def inference_time(text: str) -> float:
    return parse_time(text)


def decode_record(line: bytes | str) -> tuple[float, list[Row]] | None:
    """``(epoch seconds, rows)`` of one capture line; ``None`` for a record without an input (output-only)."""
    try:
        stamp, payload = read_record(line)
        when = inference_time(stamp)
    except ValueError as exc:
        raise UndecodableRecord(str(exc)) from None
    if payload is None:
        return None
    return when, payload_rows(payload)


def payload_rows(payload: dict[str, Any]) -> list[Row]:
    encoding = str(payload.get("encoding", "JSON")).upper()
    content_type = str(payload.get("observedContentType", "")).split(";", 1)[0].strip().lower()
    data = payload.get("data", "")
    if encoding == "BASE64":
        try:
            raw = base64.b64decode(data, validate=True)
            text = raw.decode("utf-8")
        except (ValueError, UnicodeDecodeError) as exc:
            raise UndecodableRecord(f"BASE64 payload is not UTF-8 text: {exc}") from None
        encoding = "CSV" if "csv" in content_type else "JSON"
        data = text
    if encoding == "CSV":
        return csv_rows(str(data))
    if encoding == "JSON":
        if "jsonlines" in content_type:
            return [r for line in str(data).splitlines() if line.strip() for r in json_rows(_loads(line))]
        return json_rows(_loads(data))
    raise UndecodableRecord(f"unknown encoding {encoding!r}")


def _loads(data: Any) -> Any:
    try:
        return orjson.loads(data)
    except (orjson.JSONDecodeError, TypeError) as exc:
        raise UndecodableRecord(f"JSON payload does not parse: {exc}") from None


def csv_rows(text: str) -> list[Row]:
    return [list(r) for r in csv.reader(io.StringIO(text)) if r]


def json_rows(body: Any) -> list[Row]:
    if isinstance(body, dict):
        if "instances" in body:
            return _rows(body["instances"])
        if "inputs" in body:
            inputs = body["inputs"]
            if isinstance(inputs, list) and inputs and all(isinstance(t, dict) and "data" in t for t in inputs):
                return _v2_rows(inputs)
            if isinstance(inputs, dict):
                return _columnar_rows(inputs)
            return _rows(inputs)
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
    """KServe V2 inputs: one [N, F] tensor gives positional rows; several [N] / [N, 1] tensors give named ones."""
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
    if any(width != 1 for _, width, _, _ in shaped) or len({n for *_, n in shaped}) != 1:
        raise UndecodableRecord("V2 inputs: several tensors must each hold one value per row")
    n = shaped[0][3]
    return [{name: data[i] for name, _, data, _ in shaped} for i in range(n)]


def _flatten(data: Any) -> list[Any]:
    if not isinstance(data, list):
        return [data]
    out: list[Any] = []
    for item in data:
        out.extend(_flatten(item))
    return out
