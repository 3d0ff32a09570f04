"""Requests built at send time: ``--payload PY_FILE:FUNCTION`` (a fresh body per request: new ids, times, hashes)
and ``--endpoint-name`` (InvokeEndpoint through ``servekit up``, signed with SigV4 per request).

The payload function is called with no arguments and returns bytes, str (UTF-8) or anything JSON-serializable.
Before the run it is timed alone (``payload_bodies_per_s`` in the report): a function slower than the rate asked
for makes the load generator the bottleneck, and the report says so.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from time import perf_counter, time
from typing import Any
from urllib.parse import quote

import orjson

from servekit.aws.sigv4 import sign_headers
from servekit.tools.bench.client import build_request
from servekit.tools.bench.spec import BenchSpec
from servekit.tools.bench.workload import BenchError, Workload, count_rows, endpoint, read_body_file

CALIBRATE_S = 0.3


def invoke_endpoint(spec: BenchSpec) -> tuple[str, dict[str, str]]:
    """InvokeEndpoint's path and headers (before signing)."""
    headers = {"Content-Type": "text/csv" if spec.csv else "application/json", "Accept": "application/json"}
    if spec.target_model:
        headers["X-Amzn-SageMaker-Target-Model"] = spec.target_model
    if spec.target_variant:
        headers["X-Amzn-SageMaker-Target-Variant"] = spec.target_variant
    return invocation_path(spec.endpoint_name or ""), headers


def invocation_path(endpoint_name: str) -> str:
    """InvokeEndpoint's request path (servekit.tools.locust signs the same)."""
    return f"/endpoints/{quote(endpoint_name, safe='')}/invocations"


def is_payload_function(ref: str) -> bool:
    """Whether ``ref`` names a body function (``path/to/file.py:function``) rather than a file of bodies."""
    file, sep, name = ref.rpartition(":")
    return bool(sep) and file.endswith(".py") and name.isidentifier()


def load_payload(ref: str) -> Callable[[], Any]:
    """``path/to/file.py:function`` as a callable."""
    file, sep, name = ref.rpartition(":")
    if not sep or not file or not name.isidentifier():
        raise BenchError(f"--payload {ref!r} must look like PY_FILE:FUNCTION")
    path = Path(file)
    if not path.is_file():
        raise BenchError(f"--payload: no file {file}")
    module_name = f"servekit_bench_payload_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise BenchError(f"--payload: cannot load {file} as Python")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent.resolve()))  # the file may import its neighbours
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise BenchError(f"--payload: {file} failed to import: {type(exc).__name__}: {exc}") from None
    finally:
        sys.path.pop(0)
    fn = getattr(module, name, None)
    if not callable(fn):
        raise BenchError(f"--payload: {file} has no function {name}")
    return fn  # type: ignore[no-any-return]


def encode(body: Any) -> bytes:
    """A payload function's body: bytes as they are, str as UTF-8, anything else (dict, list, numbers) as JSON."""
    if isinstance(body, bytes | bytearray | memoryview):
        return bytes(body)
    if isinstance(body, str):
        return body.encode()
    return orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)


def bodies_per_s(fn: Callable[[], Any], seconds: float = CALIBRATE_S) -> float:
    """How many bodies ``fn`` makes (and encodes) per second alone, on this thread."""
    n = 0
    start = perf_counter()
    end = start + seconds
    while True:
        encode(fn())
        n += 1
        now = perf_counter()
        if now >= end:
            return n / (now - start)


def build_dynamic(spec: BenchSpec) -> Workload:
    """The workload of ``--endpoint-name`` or ``--payload``: bodies from the function or ``--body_file``."""
    if spec.endpoint_name:
        path, headers = invoke_endpoint(spec)
    else:
        path, headers = endpoint(spec.protocol, spec.model, spec.version, csv=spec.csv)
    headers.update(dict(spec.headers))
    bodies = [] if spec.payload or not spec.body_file else read_body_file(spec.body_file)
    rows = [count_rows(b, spec.protocol, spec.csv) or spec.rows for b in bodies]
    return dynamic_workload(spec, path, headers, bodies, rows)


def dynamic_workload(
    spec: BenchSpec, path: str, headers: dict[str, str], bodies: list[bytes], rows: list[int]
) -> Workload:
    """A workload whose ``make(k)`` builds each request when it is sent."""
    authority = spec.target.authority
    payload = load_payload(spec.payload) if spec.payload else None
    try:
        first = encode(payload()) if payload else None
    except Exception as exc:
        raise BenchError(f"--payload function failed: {type(exc).__name__}: {exc}") from None
    if payload is None and not bodies:
        raise BenchError("--endpoint-name needs bodies: --body_file or --payload")
    sample = tuple(bodies) if bodies else (first or b"",)
    n = len(sample)
    signer = None
    if spec.endpoint_name:
        if not (spec.access_key_id and spec.secret_access_key):
            raise BenchError('--endpoint-name needs keys: eval "$(servekit env)" (or SERVEKIT_HOME / --home)')
        signer = (spec.access_key_id, spec.secret_access_key, spec.region)
    signed_headers = {"Host": authority, **headers}

    def make(k: int) -> bytes:
        body = encode(payload()) if payload is not None else sample[k % n]
        if signer is None:
            return build_request("POST", path, authority, headers, body)
        auth = sign_headers(
            "POST",
            path,
            signed_headers,
            body,
            access_key_id=signer[0],
            secret=signer[1],
            region=signer[2],
            service="sagemaker",
            now=time(),
        )
        return build_request("POST", path, authority, {**headers, **auth}, body)

    rate = bodies_per_s(payload) if payload is not None else None
    return Workload(
        "POST",
        path,
        headers,
        tuple({} for _ in sample),
        sample,
        tuple(rows) if rows else (spec.rows,),
        tuple(make(k) for k in range(n)),
        make=make,
        payload_bodies_per_s=rate,
    )
