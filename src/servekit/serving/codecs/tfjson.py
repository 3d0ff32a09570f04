"""TF Serving's JSON tensor encoding (row and columnar), shared by the TF REST and SageMaker adapters."""

from __future__ import annotations

import base64
import binascii
import functools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from servekit.errors import invalid
from servekit.serving.codecs.json import dumps, loads
from servekit.serving.codecs.numeric_json import MIN_BYTES as NUMERIC_MIN_BYTES
from servekit.serving.codecs.numeric_json import numeric_tensor
from servekit.serving.schema import ONLY_INPUT, InferenceResponse
from servekit.types import CLASSIFY_METHOD, MAX_DIMS, PREDICT_METHOD, REGRESS_METHOD, Signature


def _b64(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) != {"b64"} or not isinstance(value["b64"], str):
            raise invalid('a JSON object inside a tensor must be {"b64": "<base64 string>"}')
        try:
            return base64.b64decode(value["b64"], validate=True)
        except binascii.Error as exc:
            raise invalid(f"invalid base64 in a b64 value: {exc}") from None
    if isinstance(value, list):
        return [_b64(v) for v in value]
    return value


def _depth(value: Any) -> int:
    """How deep the first elements of nested lists go (iteratively: the value may be deeply nested)."""
    depth = 0
    while isinstance(value, list):
        depth += 1
        value = value[0] if value else None
    return depth


def to_array(value: Any, name: str) -> npt.NDArray[Any]:
    """A JSON value (nested lists of numbers, strings, {"b64": ...}) as a numpy array."""
    label = f"input '{name}'" if name else "the input"
    try:
        arr = np.asarray(value)
    except ValueError:
        if _depth(value) > MAX_DIMS:
            raise invalid(f"{label} nests lists more than {MAX_DIMS} levels deep, the most a tensor has") from None
        raise invalid(f"{label} is ragged: every row must have the same length") from None
    if arr.dtype == object:
        decoded = _b64(value)
        try:
            arr = np.array(decoded, dtype=object)
        except ValueError:
            raise invalid(f"{label} is ragged: every row must have the same length") from None
        if any(isinstance(v, dict | list) for v in arr.ravel()):
            raise invalid(f"{label} is ragged or holds objects: every row must have the same length")
    return arr


def decode_predict(body: Any, sig_inputs: Sequence[str]) -> tuple[dict[str, npt.NDArray[Any]], bool]:
    """Inputs of a :predict body and whether it used the row ("instances") format."""
    if not isinstance(body, dict):
        raise invalid('the request body must be a JSON object with "instances" or "inputs"')
    has_rows, has_cols = "instances" in body, "inputs" in body
    if has_rows == has_cols:
        raise invalid(
            'the request body must hold exactly one of "instances" (row format) or "inputs" (columnar format)'
        )
    allowed = {"instances", "inputs", "signature_name"}
    extra = set(body) - allowed
    if extra:
        raise invalid(f"unknown key(s) in the request body: {sorted(extra)}; allowed: {sorted(allowed)}")
    if has_rows:
        return decode_instances(body["instances"], sig_inputs), True
    value = body["inputs"]
    if isinstance(value, dict) and not (set(value) == {"b64"}):
        return {str(k): to_array(v, str(k)) for k, v in value.items()}, False
    return {ONLY_INPUT: to_array(value, "")}, False


def decode_instances(instances: Any, sig_inputs: Sequence[str]) -> dict[str, npt.NDArray[Any]]:
    if not isinstance(instances, list):
        raise invalid('"instances" must be a list with one entry per example')
    if not instances:
        raise invalid('"instances" is empty; send at least one example')
    first = instances[0]
    named = isinstance(first, dict) and not (set(first) == {"b64"})
    if not named:
        return {ONLY_INPUT: to_array(instances, "")}
    names = list(first)
    columns: dict[str, list[Any]] = {n: [] for n in names}
    for i, row in enumerate(instances):
        if not isinstance(row, dict) or set(row) != set(names):
            raise invalid(
                f"instance {i} must be an object with the same keys as instance 0 ({names}); "
                f"signature inputs: {list(sig_inputs)}"
            )
        for n in names:
            columns[n].append(row[n])
    return {n: to_array(v, n) for n, v in columns.items()}


def _jsonable(arr: npt.NDArray[Any], name: str) -> Any:
    if arr.dtype.kind in "biuf":
        return arr  # orjson serialises numeric arrays natively
    if name.endswith("_bytes"):
        return _map(
            arr.tolist(), lambda v: {"b64": base64.b64encode(v if isinstance(v, bytes) else str(v).encode()).decode()}
        )
    return _map(arr.tolist(), lambda v: v.decode("utf-8", "replace") if isinstance(v, bytes) else v)


def _map(value: Any, fn: Any) -> Any:
    if isinstance(value, list):
        return [_map(v, fn) for v in value]
    return fn(value)


def encode_predict(resp: InferenceResponse, rows: bool) -> dict[str, Any]:
    outs = resp.outputs
    if len(outs) == 1:
        ((name, arr),) = outs.items()
        return {"predictions" if rows else "outputs": _jsonable(arr, name)}
    if not rows:
        return {"outputs": {n: _jsonable(a, n) for n, a in outs.items()}}
    lengths = {a.shape[0] if a.ndim else 0 for a in outs.values()}
    if len(lengths) != 1:
        raise invalid(
            "outputs have different batch sizes, so they cannot be returned in row format; "
            'send "inputs" (columnar format) instead'
        )
    # Float rows stay numpy so orjson writes float32 as float32 (tolist() would widen 0.8759845 to
    # 0.8759844899177551); integers go through tolist(), exact either way.
    per_name = {n: _rows(_jsonable(a, n)) for n, a in outs.items()}
    return {"predictions": [{n: v[i] for n, v in per_name.items()} for i in range(lengths.pop())]}


# Numeric dtypes by their one-letter codes (checking ``dtype.char`` is far cheaper than comparing dtypes); float16
# ("e") is left out: orjson writes a float16 array's values and a float16 scalar's differently.
_ROW_CHARS = frozenset("?bBhHiIlLqQfd")
# Below this many rows a dict per row costs no more than cutting whole arrays (timeit, two outputs: 3.9 vs 5.1 us
# at one row, even at four, 31 vs 18 us at 32).
_FAST_ROWS = 4


def array_rows(doc: bytes, ndim: int) -> list[bytes]:
    """The rows of an array serialised by orjson (``[r0,r1,...]``, no spaces), each as its own JSON text.

    Numbers hold no brackets or commas, so the rows of an N-d array are separated by ``]`` * (N - 1), a comma
    and ``[`` * (N - 1), and by nothing shorter. Every dimension after the first must be non-empty."""
    depth = ndim - 1
    if depth == 0:
        return doc[1:-1].split(b",")
    opening, closing = b"[" * depth, b"]" * depth
    inner = doc[1 + depth : -1 - depth]
    return [opening + row + closing for row in inner.split(closing + b"," + opening)]


@functools.lru_cache(maxsize=256)  # output names come from the models' signatures: a handful per server
def _row_keys(names: tuple[str, ...]) -> tuple[bytes, ...]:
    """What precedes each output's value in a row after the first: ``},{"a":`` then ``,"b":`` and so on."""
    keys = [b"," + orjson.dumps(name) + b":" for name in names]
    keys[0] = b"}," + b"{" + keys[0][1:]
    return tuple(keys)


def encode_rows_fast(outputs: Mapping[str, npt.NDArray[Any]]) -> bytes | None:
    """``{"predictions": [...]}`` in row format for several numeric outputs, byte for byte what
    ``dumps(encode_predict(resp, True))`` writes, without a dict and a numpy scalar per value: each output is
    serialised whole and cut into rows. None below ``_FAST_ROWS`` rows, when an output is not a numeric array
    with non-empty dimensions after the first, the outputs' lengths differ, or orjson refuses one (not
    C-contiguous, not in native byte order): the caller then takes the general path, which answers as always."""
    first = next(iter(outputs.values()), None)
    if first is None or not first.ndim or first.shape[0] < _FAST_ROWS:  # the usual small answer: decided at once
        return None
    n = -1
    for arr in outputs.values():
        if arr.dtype.char not in _ROW_CHARS or not arr.ndim or not arr.size or n not in (-1, arr.shape[0]):
            return None
        n = arr.shape[0]
    try:
        columns = [array_rows(orjson.dumps(a, option=orjson.OPT_SERIALIZE_NUMPY), a.ndim) for a in outputs.values()]
        keys = _row_keys(tuple(outputs))
    except TypeError:  # orjson's JSONEncodeError, or its refusal of a foreign-endian array: let the general path answer
        return None
    # Key, value, key, value... for every row, interleaved by slice assignment (no Python step per row or value).
    width = 2 * len(keys)
    pieces: list[bytes] = [b""] * (width * n)
    for j, (key, column) in enumerate(zip(keys, columns, strict=True)):
        pieces[2 * j :: width] = [key] * n
        pieces[2 * j + 1 :: width] = column
    pieces[0] = keys[0][2:]  # the first row opens with "{", not "},{"
    return b'{"predictions":[' + b"".join(pieces) + b"}]}"


def _rows(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return list(value) if value.dtype.kind == "f" else value.tolist()
    return value


def decode_examples(body: Any, sig: Signature) -> dict[str, npt.NDArray[Any]]:
    """A :classify/:regress body ({"context", "examples"}) as one [n_examples, n_features] input."""
    if not isinstance(body, dict) or "examples" not in body:
        raise invalid('the request body must be a JSON object with "examples" (and optional "context")')
    examples, context = body["examples"], body.get("context", {})
    if not isinstance(examples, list) or not examples:
        raise invalid('"examples" must be a non-empty list of objects mapping feature names to values')
    if not isinstance(context, dict):
        raise invalid('"context" must be an object mapping feature names to values')
    width = sig.inputs[0].shape[-1] if sig.inputs and len(sig.inputs[0].shape) == 2 else -1
    features = sig.feature_names or tuple(f"x{i}" for i in range(max(width, 0)))
    rows = []
    for i, ex in enumerate(examples):
        if not isinstance(ex, dict):
            raise invalid(f"example {i} must be an object mapping feature names to values")
        clash = set(ex) & set(context)
        if clash:
            raise invalid(f"feature(s) {sorted(clash)} appear in both context and example {i}")
        merged = {**context, **ex}
        rows.append(_example_row(merged, features, width, i))
    return {ONLY_INPUT: to_array(rows, "examples")}


def _example_row(ex: Mapping[str, Any], features: Sequence[str], width: int, i: int) -> list[Any]:
    def scalar(v: Any, f: str) -> Any:
        if isinstance(v, list):
            if len(v) != 1:
                raise invalid(f"feature '{f}' of example {i} must hold one value, got {len(v)}")
            return v[0]
        return v

    if all(f in ex for f in features) and features:
        extra = set(ex) - set(features)
        if extra:
            raise invalid(f"example {i} has unknown feature(s) {sorted(extra)}; features: {list(features)}")
        return [scalar(ex[f], f) for f in features]
    if len(ex) == 1:
        (only,) = ex.values()
        if isinstance(only, list) and (width < 0 or len(only) == width):
            return list(only)
    missing = [f for f in features if f not in ex]
    raise invalid(
        f"example {i} lacks feature(s) {missing}; expected features {list(features)} "
        f"or one feature holding all {width} values"
    )


def encode_classify(resp: InferenceResponse) -> dict[str, Any]:
    scores = next(iter(resp.outputs.values()))
    labels = resp.class_labels or tuple(str(i) for i in range(scores.shape[-1]))
    return {"results": [[[labels[j], float(s)] for j, s in enumerate(row)] for row in scores.tolist()]}


def encode_regress(resp: InferenceResponse) -> dict[str, Any]:
    values = next(iter(resp.outputs.values()))
    return {"results": [float(v) for v in np.asarray(values).reshape(-1).tolist()]}


class ExamplesPayload:
    """A ``:classify``/``:regress`` body: its examples become tensors only once the signature is chosen (the
    feature order comes from the signature); a :class:`~servekit.serving.schema.Payload`."""

    def __init__(self, body: Any) -> None:
        self._body = body

    def signature_name(self) -> str | None:
        name = self._body.get("signature_name") if isinstance(self._body, dict) else None
        return name if isinstance(name, str) else None

    def tensors(self, sig: Signature) -> dict[str, npt.NDArray[Any]]:
        return decode_examples(self._body, sig)


def decode_request(raw: bytes, method: str) -> tuple[str | None, Any, bool]:
    """A ``:predict``/``:classify``/``:regress`` body: its ``signature_name``, its inputs (tensors, or an
    :class:`ExamplesPayload` for the examples verbs) and whether they came as rows."""
    if method == PREDICT_METHOD and len(raw) >= NUMERIC_MIN_BYTES:
        # One tensor of numbers, the common body, straight into numpy; None for anything else, read below.
        fast = numeric_tensor(raw)
        if fast is not None:
            return fast[0], {ONLY_INPUT: fast[1]}, fast[2]
    body = loads(raw)
    sig_name = body.get("signature_name") if isinstance(body, dict) else None
    if sig_name is not None and not isinstance(sig_name, str):
        raise invalid('"signature_name" must be a string')
    if method == PREDICT_METHOD:
        inputs, rows = decode_predict(body, ())
        return sig_name, inputs, rows
    return sig_name, ExamplesPayload(body), True


def encode_response(resp: InferenceResponse, method: str, rows: bool) -> bytes:
    """The JSON answer to a ``:predict``/``:classify``/``:regress`` request."""
    if method == CLASSIFY_METHOD:
        return dumps(encode_classify(resp))
    if method == REGRESS_METHOD:
        return dumps(encode_regress(resp))
    if rows and len(resp.outputs) > 1:
        fast = encode_rows_fast(resp.outputs)
        if fast is not None:
            return fast
    return dumps(encode_predict(resp, rows))
