"""Faster equivalents of two SageMaker codecs on the batch hot path, byte for byte the same results.

- :func:`decode_jsonlines`: one ``orjson.loads`` per line without the per-line error bookkeeping; any
  failure (blank line, NaN, malformed JSON) falls back to the adapter's own decoder, which then gives the
  same values or the same error message.
- :func:`encode_jsonlines`: numeric outputs serialised whole by orjson and cut into lines, instead of one
  ``orjson.dumps`` per row. It reproduces ``_rows`` exactly: a single output is written from ``tolist()``
  (float64 digits), several outputs as one object per row with float arrays in their own precision.
  Anything else (strings, 3-D outputs, mismatched batch sizes) returns None: the caller uses the adapter.

They belong in ``servekit.protocols.sagemaker`` (``/invocations`` would gain the same); they live here until
that module is free to change. ``tests/unit/test_transform_fastpath.py`` holds them to the adapter's bytes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from servekit.protocols.sagemaker import decode_jsonlines as _decode_jsonlines

_NUMPY = orjson.OPT_SERIALIZE_NUMPY
_NUMERIC = "biuf"
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def decode_jsonlines(body: bytes) -> list[Any]:
    lines = body.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    if lines:
        try:
            return list(map(orjson.loads, lines))
        except orjson.JSONDecodeError:
            pass
    return _decode_jsonlines(body)


def _rows(doc: bytes, ndim: int) -> list[bytes]:
    """The rows of a serialised 1-D or 2-D array (for 2-D: each row's contents without brackets)."""
    inner = doc[1:-1]
    if ndim == 1:
        return inner.split(b",")
    return inner[1:-1].split(b"],[")


def encode_jsonlines(outputs: dict[str, npt.NDArray[Any]]) -> bytes | None:
    arrays = [np.ascontiguousarray(a) for a in outputs.values()]
    if not arrays or any(a.dtype.kind not in _NUMERIC or a.ndim not in (1, 2) for a in arrays):
        return None
    if len(arrays) > 1 and any(a.dtype.kind == "f" and a.dtype not in _FLOATS for a in arrays):
        return None
    n = arrays[0].shape[0]
    if n == 0 or any(a.shape[0] != n for a in arrays) or any(a.ndim == 2 and a.shape[1] == 0 for a in arrays):
        return None
    if len(arrays) == 1:
        arr = arrays[0]
        try:
            doc = orjson.dumps(arr.astype(np.float64) if arr.dtype.kind == "f" else arr, option=_NUMPY)
        except orjson.JSONEncodeError:
            return None
        inner = doc[1:-1]
        return (inner.replace(b"],[", b"]\n[") if arr.ndim == 2 else inner.replace(b",", b"\n")) + b"\n"
    parts = []
    for i, (name, arr) in enumerate(zip(outputs, arrays, strict=True)):
        key = (b"{" if i == 0 else b",") + orjson.dumps(name).replace(b"%", b"%%") + b":"
        parts.append(key + (b"[%b]" if arr.ndim == 2 else b"%b"))
    template = b"".join(parts) + b"}\n"
    try:
        columns = [_rows(orjson.dumps(a, option=orjson.OPT_SERIALIZE_NUMPY), a.ndim) for a in arrays]
    except orjson.JSONEncodeError:
        return None
    return b"".join(template % row for row in zip(*columns, strict=True))
