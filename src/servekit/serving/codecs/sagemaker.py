"""SageMaker ``/invocations`` bodies as pure functions: shared by the HTTP adapter and batch transform.

Content handling follows sagemaker-tensorflow-serving-container: JSON bodies holding "instances" or
"inputs" are TF Serving requests, other JSON becomes instances, JSON Lines and CSV rows become instances;
``application/x-npy`` is one columnar tensor. The JSON Lines codecs have fast paths (one orjson call per
line to decode; numeric outputs serialised whole and cut into lines to encode) that give the same bytes as
the general ones.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from servekit.errors import ErrorCode, ServekitError, invalid
from servekit.serving.codecs.json import dumps, loads
from servekit.serving.codecs.numeric_json import MIN_BYTES as NUMERIC_MIN_BYTES
from servekit.serving.codecs.numeric_json import numeric_rows, numeric_tensor
from servekit.serving.codecs.tfjson import array_rows, decode_instances, decode_predict, encode_predict
from servekit.serving.schema import ONLY_INPUT, InferenceResponse
from servekit.types import TensorSpec

JSON, JSONLINES, CSV, NPY = "application/json", "application/jsonlines", "text/csv", "application/x-npy"
_JSONLINES_ALIASES = {"application/jsonlines", "application/jsonl", "application/x-jsonlines", "application/jsons"}
ACCEPTS = (JSON, JSONLINES, CSV, NPY)


def _media(value: str) -> str:
    return value.split(";", 1)[0].strip().lower()


def media_type(value: str) -> str:
    """The media type of a Content-Type/Accept value, JSON Lines aliases folded into one."""
    media = _media(value)
    return JSONLINES if media in _JSONLINES_ALIASES else media


def negotiate_accept(raw: str, default: str = JSON) -> str:
    """The Accept type to answer with: the first supported one listed; ``default`` for none or */*."""
    for part in raw.split(","):
        media = _media(part)
        if media in ("", "*/*"):
            return default
        if media in _JSONLINES_ALIASES:
            return JSONLINES
        if media in ACCEPTS:
            return media
    if not raw.strip():
        return default
    raise ServekitError(ErrorCode.NOT_ACCEPTABLE, f"Accept {raw!r} is not supported; supported: {', '.join(ACCEPTS)}")


def decode_csv(body: bytes) -> npt.NDArray[Any]:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise invalid(f"the CSV body is not UTF-8 text (byte {exc.start})") from None
    # newline=None: universal newlines, so CR-only (classic Mac) and CRLF bodies split into rows too.
    reader = csv.reader(io.StringIO(text, newline=None))
    try:
        rows = _csv_rows(reader)
    except csv.Error as exc:
        raise invalid(f"CSV line {reader.line_num}: {_csv_problem(exc)}") from None
    if not rows:
        raise invalid("the CSV body holds no rows")
    return np.asarray(rows, dtype=np.float64)


def _csv_rows(reader: Iterable[list[str]]) -> list[list[float]]:
    rows: list[list[float]] = []
    width = -1
    for lineno, row in enumerate(reader, start=1):
        if not row or all(not c.strip() for c in row):
            continue
        try:
            values = [float(c) for c in row]
        except ValueError:
            bad = next(c for c in row if not _is_float(c))
            raise invalid(f"CSV line {lineno}: {bad!r} is not a number") from None
        if width >= 0 and len(values) != width:
            raise invalid(f"CSV line {lineno} has {len(values)} columns; line 1 has {width}")
        width = len(values)
        rows.append(values)
    return rows


def _csv_problem(exc: csv.Error) -> str:
    text = str(exc)
    if text.startswith("field larger than field limit"):
        return f"a field is longer than {csv.field_size_limit()} characters, the most a CSV field may hold"
    return text


def _is_float(c: str) -> bool:
    try:
        float(c)
    except ValueError:
        return False
    return True


def _json_lines(body: bytes) -> bool:
    """Whether a body that is not one JSON document is several, one per line (each line a JSON array or object)."""
    lines = [line.strip() for line in body.splitlines() if line.strip()]
    if len(lines) < 2 or not all(line[:1] in (b"[", b"{") for line in lines):
        return False
    try:
        for line in lines:
            orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return True


def decode_jsonlines(body: bytes) -> list[Any]:
    values = []
    for lineno, line in enumerate(body.splitlines(), start=1):
        if line.strip():
            values.append(loads(line, f"JSON Lines body (line {lineno})"))
    if not values:
        raise invalid("the JSON Lines body holds no records")
    return values


# Element kinds a .npy body may hold: bool, int, uint, float, str, bytes. Structured/void ('V'), complex,
# datetime and timedelta arrays have no tensor datatype a model takes.
_NPY_KINDS = "biufUS"


def decode_npy(body: bytes) -> npt.NDArray[Any]:
    """One .npy array. The header is checked against the body's size first: ``np.load`` would allocate
    whatever shape a tiny body declares before finding the data missing."""
    stream = io.BytesIO(body)
    try:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(stream)
        else:
            shape, _, dtype = np.lib.format.read_array_header_2_0(stream)
    except Exception as exc:  # numpy's header parser raises ValueError, SyntaxError, tokenize.TokenError...
        raise invalid(f"the body is not a valid .npy array: {exc}") from None
    if any(d < 0 for d in shape):
        raise invalid(f"the .npy header declares shape {list(shape)}, which has a negative dimension")
    needed = math.prod(shape) * dtype.itemsize
    if dtype.hasobject:
        raise invalid("the .npy array holds Python objects; send a numeric or fixed-width string array")
    if dtype.kind not in _NPY_KINDS:
        raise invalid(
            f"the .npy array holds {dtype} values (kind {dtype.kind!r}); send a boolean, integer, float or "
            "fixed-width string array"
        )
    if needed > len(body) - stream.tell():
        raise invalid(
            f"the .npy header declares shape {list(shape)} of {dtype} ({needed} bytes) but the body "
            f"carries {len(body) - stream.tell()} bytes of data"
        )
    try:
        arr = np.load(io.BytesIO(body), allow_pickle=False)
    except Exception as exc:  # only client bytes are read here (MemoryError included): they are at fault
        raise invalid(f"the body is not a valid .npy array: {exc}") from None
    if not isinstance(arr, np.ndarray):
        raise invalid("the body must be a single .npy array, not an .npz archive")
    return arr


def rows(resp: InferenceResponse) -> list[Any]:
    """One entry per example, for the line-oriented Accept types."""
    doc = encode_predict(resp, rows=True)["predictions"]
    return list(doc.tolist() if isinstance(doc, np.ndarray) else doc)


def numeric_body(body: bytes) -> tuple[str | None, npt.NDArray[Any], bool] | None:
    """A JSON body of numbers as :func:`decode_body` reads it, through the ``:predict`` fast path
    (``codecs/numeric_json.py``): ``{"instances"|"inputs": ...}`` as TF Serving's, or a bare list of rows; None
    where the general reading must answer."""
    fast = numeric_tensor(body)
    if fast is not None:
        return fast
    rows = numeric_rows(body)
    return None if rows is None else (None, rows, True)


def decode_body(body: bytes, media: str) -> tuple[dict[str, npt.NDArray[Any]], bool, str | None]:
    """Named inputs of a predict body, whether they came as rows, and the signature it asks for."""
    if media == JSON:
        if len(body) >= NUMERIC_MIN_BYTES:  # a tensor of numbers, the usual large body: straight into numpy
            fast = numeric_body(body)
            if fast is not None:
                return {ONLY_INPUT: fast[1]}, fast[2], fast[0]
        try:
            doc = loads(body)
        except ServekitError:
            if not _json_lines(body):
                raise
            # several JSON documents, one per line, sent as application/json: SageMaker's TF Serving container reads
            # them as JSON Lines (the SDK's JSONLinesSerializer with its default content type does this)
            return decode_instances(decode_jsonlines_fast(body), ()), True, None
        if isinstance(doc, dict) and ("instances" in doc or "inputs" in doc):
            sig_name = doc.get("signature_name")
            inputs, as_rows = decode_predict(doc, ())
            return inputs, as_rows, sig_name if isinstance(sig_name, str) else None
        if isinstance(doc, dict):
            raise invalid('a JSON object body must hold "instances" or "inputs"; send a bare list for rows')
        return decode_instances(doc if isinstance(doc, list) else [doc], ()), True, None
    if media in _JSONLINES_ALIASES:
        return decode_instances(decode_jsonlines_fast(body), ()), True, None
    if media == CSV:
        return {ONLY_INPUT: decode_csv(body)}, True, None
    if media == NPY:
        return {ONLY_INPUT: decode_npy(body)}, False, None
    raise ServekitError(
        ErrorCode.UNSUPPORTED_MEDIA_TYPE,
        f"Content-Type {media!r} is not supported; send application/json, application/jsonlines, text/csv or "
        "application/x-npy (or serve a model with an inference.py handler)",
    )


def encode_body(resp: InferenceResponse, accept: str, as_rows: bool) -> bytes:
    """The predict response body for ``accept`` (one of :data:`ACCEPTS`)."""
    if accept == JSON:
        return dumps(encode_predict(resp, as_rows))
    if accept == JSONLINES:
        fast = encode_jsonlines_fast(resp.outputs)
        if fast is not None:
            return fast
        return b"".join(orjson.dumps(r, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n" for r in rows(resp))
    if accept == CSV and len(resp.outputs) > 1:
        return encode_csv_columns(resp.outputs)
    if len(resp.outputs) != 1:
        raise ServekitError(
            ErrorCode.NOT_ACCEPTABLE,
            f"{accept} can carry one output, the model returned {len(resp.outputs)}; ask for application/json",
        )
    arr = next(iter(resp.outputs.values()))
    if accept == NPY:
        bio = io.BytesIO()
        np.save(bio, arr if arr.dtype != object else arr.astype(str), allow_pickle=False)
        return bio.getvalue()
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for row in np.atleast_1d(arr).tolist():
        writer.writerow(row if isinstance(row, list) else [row])
    return buf.getvalue().encode()


def encode_csv_columns(outputs: dict[str, npt.NDArray[Any]]) -> bytes:
    """Several outputs as CSV, as the frameworks' containers write them: one row per example holding each
    output's values in turn (the outputs in the model's order), an output of several values per example
    flattened into consecutive columns. Every output needs one entry per example."""
    arrays = [np.asarray(a) for a in outputs.values()]
    n = arrays[0].shape[0] if arrays[0].ndim else -1
    if n < 0 or any(a.ndim == 0 or a.shape[0] != n for a in arrays):
        shapes = ", ".join(f"{name} {list(np.shape(a))}" for name, a in outputs.items())
        raise ServekitError(
            ErrorCode.NOT_ACCEPTABLE,
            f"text/csv writes a row per example, and these outputs do not have one entry per example ({shapes}); "
            "ask for application/json",
        )
    columns = [_csv_cells(a.reshape(n, -1)) for a in arrays]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerows([cell for part in parts for cell in part] for parts in zip(*columns, strict=True))
    return buf.getvalue().encode()


def _csv_cells(arr: npt.NDArray[Any]) -> list[list[Any]]:
    rows: list[list[Any]] = arr.tolist()
    if arr.dtype.kind in "OS":  # bytes (string tensors) are written as their text, not as b'...'
        return [[c.decode("utf-8", "replace") if isinstance(c, bytes) else c for c in row] for row in rows]
    return rows


_NUMPY = orjson.OPT_SERIALIZE_NUMPY
_NUMERIC = "biuf"
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def decode_jsonlines_fast(body: bytes) -> list[Any]:
    """One orjson.loads per line; any failure falls back to :func:`decode_jsonlines` (same values or error)."""
    lines = body.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    if lines:
        try:
            return list(map(orjson.loads, lines))
        except orjson.JSONDecodeError:
            pass
    return decode_jsonlines(body)


def encode_jsonlines_fast(outputs: dict[str, npt.NDArray[Any]]) -> bytes | None:
    """Numeric outputs serialised whole and cut into lines, byte for byte what :func:`rows` gives; None when
    the outputs are not plain numeric 1-D/2-D arrays (the caller then encodes row by row)."""
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
    for i, name in enumerate(outputs):
        parts.append((b"{" if i == 0 else b",") + orjson.dumps(name).replace(b"%", b"%%") + b":%b")
    template = b"".join(parts) + b"}\n"
    try:
        columns = [array_rows(orjson.dumps(a, option=orjson.OPT_SERIALIZE_NUMPY), a.ndim) for a in arrays]
    except orjson.JSONEncodeError:
        return None
    return b"".join(template % row for row in zip(*columns, strict=True))


def example_json_body(inputs: Sequence[TensorSpec]) -> str:
    """One row for ``inputs`` as an ``application/json`` body of ``/invocations``: a bare list of rows (see
    :func:`decode_body`), the row being the input's value without its batch dimension, or an object by input
    name for several inputs; zeros of each input's dtype ("" for BYTES), any other variable dimension 1. What
    ``servekit deploy`` prints, so the example fits the model's width and dtype."""

    def value(spec: TensorSpec) -> Any:
        dims = spec.shape[1:] if spec.shape and spec.shape[0] == -1 else spec.shape
        shape = tuple(1 if d == -1 else d for d in dims)
        if spec.datatype == "BYTES":
            return np.full(shape, "", dtype=object).tolist()
        return np.zeros(shape, dtype=spec.dtype).tolist()

    row = value(inputs[0]) if len(inputs) == 1 else {s.name: value(s) for s in inputs}
    return json.dumps([row])
