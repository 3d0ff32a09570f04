"""What is sent: the endpoint and headers of each protocol, and request bodies from a file or a signature.

Generated bodies follow the model's KServe V2 metadata (``GET /v2/models/M``): each input gets data of its
datatype and shape, the leading ``-1`` (batch) dimension set to ``--rows`` and any other ``-1`` set to 1.
Values come from a generator seeded with ``--seed`` (floats in [0, 1), integers in [0, 10), random booleans,
8-letter strings), so two runs with the same seed send the same bytes. ``DISTINCT_BODIES`` bodies are built
and cycled, which keeps request bytes pre-built while not sending one identical body over and over.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from servekit.errors import ConfigError
from servekit.tools.bench.client import build_request, fetch
from servekit.tools.bench.spec import BenchSpec, Protocol, Target
from servekit.types import V2_DATATYPES, numpy_dtype

DISTINCT_BODIES = 16
_DUMP = orjson.OPT_SERIALIZE_NUMPY
_LETTERS = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)


class BenchError(RuntimeError):
    """The benchmark cannot start (the server is unreachable, the model unknown, the body file unusable)."""


@dataclass(frozen=True)
class InputSpec:
    name: str
    datatype: str
    shape: tuple[int, ...]  # -1: variable; dim 0 is the batch when it is -1


@dataclass(frozen=True)
class Workload:
    """The requests of a run, pre-built: ``requests[i]`` carries ``bodies[i]`` and holds ``rows[i]`` rows."""

    method: str
    path: str
    headers: dict[str, str]  # common to every request
    body_headers: tuple[dict[str, str], ...]  # per body (the binary extension's header length)
    bodies: tuple[bytes, ...]
    rows: tuple[int, ...]
    requests: tuple[bytes, ...]
    # Builds request k at send time (fresh payload bodies, a SigV4 signature per request); None: ``requests[k]``.
    make: Callable[[int], bytes] | None = None
    payload_bodies_per_s: float | None = None  # what --payload's function sustains alone, measured before the run


# ---- endpoints -------------------------------------------------------------------------------------------------


def endpoint(
    protocol: Protocol, model: str, version: int | None, *, binary: bool = False, csv: bool = False
) -> tuple[str, dict[str, str]]:
    """The path and headers of an inference request in ``protocol``."""
    at = f"/versions/{version}" if version is not None else ""
    if protocol == "tfserving":
        return f"/v1/models/{model}{at}:predict", {"Content-Type": "application/json"}
    if protocol == "kserve":
        ctype = "application/octet-stream" if binary else "application/json"
        return f"/v2/models/{model}{at}/infer", {"Content-Type": ctype}
    attrs = f"tfs-model-name={model}" + (f",tfs-model-version={version}" if version is not None else "")
    return "/invocations", {
        "Content-Type": "text/csv" if csv else "application/json",
        "Accept": "application/json",
        "X-Amzn-SageMaker-Custom-Attributes": attrs,
    }


def metadata_path(model: str, version: int | None) -> str:
    return f"/v2/models/{model}" + (f"/versions/{version}" if version is not None else "")


# ---- signatures ------------------------------------------------------------------------------------------------


def parse_metadata(doc: Any) -> list[InputSpec]:
    """The inputs of a KServe V2 model metadata document."""
    inputs = doc.get("inputs") if isinstance(doc, dict) else None
    if not isinstance(inputs, list) or not inputs:
        raise BenchError('the model metadata has no "inputs" list')
    specs = []
    for entry in inputs:
        if not isinstance(entry, dict):
            raise BenchError(f"model metadata input {entry!r} is not an object")
        name, datatype, shape = entry.get("name"), entry.get("datatype"), entry.get("shape")
        if not isinstance(name, str) or datatype not in V2_DATATYPES:
            raise BenchError(f"model metadata input {entry!r} needs a name and a V2 datatype")
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= -1 for d in shape):
            raise BenchError(f"model metadata input {name!r} has shape {shape!r}; expected integers, -1 = variable")
        specs.append(InputSpec(name, datatype, tuple(shape)))
    return specs


async def fetch_inputs(target: Target, model: str, version: int | None, timeout: float = 10.0) -> list[InputSpec]:
    path = metadata_path(model, version)
    try:
        resp = await fetch(target, "GET", path, timeout)
    except (OSError, TimeoutError) as exc:
        raise BenchError(f"cannot reach {target.url} for GET {path}: {exc or type(exc).__name__}") from None
    if resp.status != 200:
        detail = resp.body[:300].decode("utf-8", "replace")
        raise BenchError(
            f"GET {path} answered {resp.status}: {detail}; the model's metadata is needed to generate "
            "request bodies (or pass --body_file)"
        )
    try:
        doc = orjson.loads(resp.body)
    except orjson.JSONDecodeError:
        raise BenchError(f"GET {path} did not answer JSON") from None
    return parse_metadata(doc)


def concrete_shape(spec: InputSpec, rows: int) -> tuple[int, ...]:
    """The shape sent for ``spec``: a variable leading (batch) dimension is ``rows``, other variable ones 1."""
    return tuple(rows if (i == 0 and d == -1) else (1 if d == -1 else d) for i, d in enumerate(spec.shape))


def random_tensor(spec: InputSpec, shape: tuple[int, ...], rng: np.random.Generator) -> npt.NDArray[Any]:
    if spec.datatype == "BYTES":
        letters = _LETTERS[rng.integers(0, 26, size=(math.prod(shape), 8))]
        out = np.empty(math.prod(shape), dtype=object)
        out[:] = [bytes(row) for row in letters]
        return out.reshape(shape)
    dtype = numpy_dtype(spec.datatype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(0, 10, size=shape).astype(dtype)
    return rng.random(shape).astype(dtype)


def generate_tensors(
    inputs: list[InputSpec], rows: int, seed: int, count: int = DISTINCT_BODIES
) -> list[dict[str, npt.NDArray[Any]]]:
    """``count`` deterministic sets of input tensors for ``rows`` rows each."""
    rng = np.random.default_rng(seed)
    return [{s.name: random_tensor(s, concrete_shape(s, rows), rng) for s in inputs} for _ in range(count)]


# ---- encodings -------------------------------------------------------------------------------------------------


def _json_value(arr: npt.NDArray[Any]) -> Any:
    """A tensor as nested JSON-ready values (strings for BYTES; float16 widened, which orjson cannot write)."""
    if arr.dtype == object:
        return np.vectorize(lambda b: b.decode("utf-8"), otypes=[object])(arr).tolist() if arr.size else []
    if arr.dtype == np.float16:
        return arr.astype(np.float32)
    return arr


def _batched(inputs: list[InputSpec]) -> bool:
    return all(s.shape and s.shape[0] == -1 for s in inputs)


def encode_tf_json(inputs: list[InputSpec], tensors: dict[str, npt.NDArray[Any]]) -> bytes:
    """TF Serving's row format ``{"instances": [...]}``; the columnar ``"inputs"`` when an input has no batch."""
    if not _batched(inputs):
        return orjson.dumps({"inputs": {s.name: _json_value(tensors[s.name]) for s in inputs}}, option=_DUMP)
    if len(inputs) == 1:
        return orjson.dumps({"instances": _json_value(tensors[inputs[0].name])}, option=_DUMP)
    cols = {s.name: _json_value(tensors[s.name]) for s in inputs}
    instances = [{name: col[i] for name, col in cols.items()} for i in range(len(tensors[inputs[0].name]))]
    return orjson.dumps({"instances": instances}, option=_DUMP)


def encode_kserve_json(inputs: list[InputSpec], tensors: dict[str, npt.NDArray[Any]]) -> bytes:
    specs = []
    for s in inputs:
        arr = tensors[s.name]
        specs.append(
            {"name": s.name, "shape": list(arr.shape), "datatype": s.datatype, "data": _json_value(arr.ravel())}
        )
    return orjson.dumps({"inputs": specs}, option=_DUMP)


def encode_kserve_binary(inputs: list[InputSpec], tensors: dict[str, npt.NDArray[Any]]) -> tuple[bytes, int]:
    """Triton's binary tensor extension: JSON header then raw little-endian tensors; returns (body, header length)."""
    specs, blobs = [], []
    for s in inputs:
        arr = tensors[s.name]
        if s.datatype == "BYTES":
            blob = b"".join(struct.pack("<I", len(v)) + v for v in arr.ravel().tolist())
        else:
            arr = np.ascontiguousarray(arr)
            blob = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
        specs.append(
            {
                "name": s.name,
                "shape": list(arr.shape),
                "datatype": s.datatype,
                "parameters": {"binary_data_size": len(blob)},
            }
        )
        blobs.append(blob)
    header = orjson.dumps({"inputs": specs, "parameters": {"binary_data_output": True}})
    return header + b"".join(blobs), len(header)


def encode_csv(inputs: list[InputSpec], tensors: dict[str, npt.NDArray[Any]]) -> bytes:
    """SageMaker text/csv: one line per row of the single input."""
    if len(inputs) != 1 or len(inputs[0].shape) > 2 or inputs[0].datatype == "BYTES":
        raise ConfigError("--csv needs a model with one numeric input of at most two dimensions")
    arr = np.atleast_1d(tensors[inputs[0].name])
    rows = arr.reshape(len(arr), -1).tolist() if arr.ndim else [[arr.item()]]
    return "".join(",".join(repr(v) if isinstance(v, float) else str(int(v)) for v in r) + "\n" for r in rows).encode()


# ---- body files ------------------------------------------------------------------------------------------------


def read_body_file(path: str) -> list[bytes]:
    """One body per non-empty line (JSON documents, or CSV rows for --csv)."""
    try:
        lines = Path(path).read_bytes().splitlines()
    except OSError as exc:
        raise BenchError(f"cannot read --body_file {path}: {exc.strerror or exc}") from None
    bodies = [line.strip() for line in lines if line.strip()]
    if not bodies:
        raise BenchError(f"--body_file {path} holds no bodies (one per line)")
    return bodies


def count_rows(body: bytes, protocol: Protocol, csv: bool) -> int | None:
    """Rows in a body from a file, when its shape says so; None when it cannot tell."""
    if csv:
        return sum(1 for line in body.splitlines() if line.strip())
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if isinstance(doc, list):
        return len(doc)
    if not isinstance(doc, dict):
        return None
    if isinstance(doc.get("instances"), list):
        return len(doc["instances"])
    specs = doc.get("inputs")
    if protocol == "kserve" and isinstance(specs, list) and specs and isinstance(specs[0], dict):
        shape = specs[0].get("shape")
        return shape[0] if isinstance(shape, list) and shape and isinstance(shape[0], int) else None
    if isinstance(specs, dict) and specs:
        first = next(iter(specs.values()))
        return len(first) if isinstance(first, list) else None
    if isinstance(specs, list):
        return len(specs)
    return None


# ---- the workload ----------------------------------------------------------------------------------------------


def build_workload(spec: BenchSpec, inputs: list[InputSpec] | None) -> Workload:
    """Bodies from ``spec.body_file`` or generated from ``inputs``, each turned into request bytes once."""
    path, headers = endpoint(spec.protocol, spec.model, spec.version, binary=spec.binary, csv=spec.csv)
    headers.update(dict(spec.headers))
    bodies: list[bytes] = []
    rows: list[int] = []
    extra: list[dict[str, str]] = []
    if spec.body_file:
        for body in read_body_file(spec.body_file):
            bodies.append(body)
            rows.append(count_rows(body, spec.protocol, spec.csv) or spec.rows)
            extra.append({})
    else:
        if not inputs:
            raise BenchError("no --body_file and no model inputs to generate bodies from")
        for tensors in generate_tensors(inputs, spec.rows, spec.seed):
            header_len: dict[str, str] = {}
            if spec.protocol == "tfserving" or (spec.protocol == "sagemaker" and not spec.csv):
                body = encode_tf_json(inputs, tensors)
            elif spec.protocol == "sagemaker":
                body = encode_csv(inputs, tensors)
            elif spec.binary:
                body, n = encode_kserve_binary(inputs, tensors)
                header_len = {"Inference-Header-Content-Length": str(n)}
            else:
                body = encode_kserve_json(inputs, tensors)
            bodies.append(body)
            rows.append(spec.rows)
            extra.append(header_len)
    authority = spec.target.authority
    requests = tuple(
        build_request("POST", path, authority, {**headers, **e}, b) for b, e in zip(bodies, extra, strict=True)
    )
    return Workload("POST", path, headers, tuple(extra), tuple(bodies), tuple(rows), requests)
