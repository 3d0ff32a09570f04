"""servekit bench's workloads: bodies generated from a signature (dtypes, shapes, seeds), per-protocol encodings
checked with servekit's own decoders, body files, and the command-line options that pick a spec."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from servekit.errors import ConfigError
from servekit.serving.codecs.sagemaker import decode_csv
from servekit.serving.codecs.tfjson import decode_predict
from servekit.serving.codecs.v2 import decode_v2_inputs
from servekit.tools.bench.spec import BenchSpec, Target, parse_duration, parse_levels, spec_from_options
from servekit.tools.bench.workload import (
    DISTINCT_BODIES,
    BenchError,
    InputSpec,
    build_workload,
    concrete_shape,
    count_rows,
    encode_csv,
    encode_kserve_binary,
    encode_kserve_json,
    encode_tf_json,
    generate_tensors,
    parse_metadata,
)
from servekit.types import numpy_dtype

ALL_TYPES = [
    InputSpec(f"in_{dt.lower()}", dt, (-1, 3))
    for dt in ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64")
] + [InputSpec("text", "BYTES", (-1,)), InputSpec("image", "FP32", (-1, -1, 2))]
IRIS = [InputSpec("X", "FP32", (-1, 4))]


def _split_binary(body: bytes, header_len: int) -> tuple[dict[str, Any], memoryview]:
    return orjson.loads(body[:header_len]), memoryview(body)[header_len:]


def test_parse_metadata() -> None:
    doc = {"name": "m", "inputs": [{"name": "X", "datatype": "FP32", "shape": [-1, 4]}], "outputs": []}
    assert parse_metadata(doc) == [InputSpec("X", "FP32", (-1, 4))]
    bad: dict[str, Any]
    for bad in ({}, {"inputs": []}, {"inputs": [{"name": "X", "datatype": "FLOAT", "shape": [1]}]}):
        with pytest.raises(BenchError):
            parse_metadata(bad)
    with pytest.raises(BenchError):
        parse_metadata({"inputs": [{"name": "X", "datatype": "FP32", "shape": [-2]}]})


def test_shapes_from_signature() -> None:
    assert concrete_shape(InputSpec("a", "FP32", (-1, 4)), 5) == (5, 4)
    assert concrete_shape(InputSpec("a", "FP32", (-1, -1, 3)), 2) == (2, 1, 3)
    assert concrete_shape(InputSpec("a", "FP32", (7, 4)), 5) == (7, 4)  # fixed batch stays
    assert concrete_shape(InputSpec("a", "FP32", ()), 5) == ()


def test_generated_dtypes_and_shapes() -> None:
    sets = generate_tensors(ALL_TYPES, rows=4, seed=1)
    assert len(sets) == DISTINCT_BODIES
    for tensors in sets:
        for spec in ALL_TYPES:
            arr = tensors[spec.name]
            assert arr.shape == concrete_shape(spec, 4), spec
            assert arr.dtype == numpy_dtype(spec.datatype), spec
        assert all(isinstance(v, bytes) and len(v) == 8 for v in tensors["text"].tolist())
        assert (tensors["in_fp32"] >= 0).all() and (tensors["in_fp32"] < 1).all()
        assert (tensors["in_int64"] >= 0).all() and (tensors["in_int64"] < 10).all()


def test_generation_is_deterministic_per_seed() -> None:
    a = build_workload(BenchSpec(model="m", protocol="kserve", seed=3), ALL_TYPES)
    b = build_workload(BenchSpec(model="m", protocol="kserve", seed=3), ALL_TYPES)
    c = build_workload(BenchSpec(model="m", protocol="kserve", seed=4), ALL_TYPES)
    assert a.requests == b.requests
    assert a.bodies != c.bodies
    assert len(set(a.bodies)) == DISTINCT_BODIES  # distinct bodies, cycled


def test_kserve_json_decodes_to_the_generated_tensors() -> None:
    tensors = generate_tensors(ALL_TYPES, rows=3, seed=0, count=1)[0]
    doc = orjson.loads(encode_kserve_json(ALL_TYPES, tensors))
    decoded = decode_v2_inputs(doc["inputs"])
    for spec in ALL_TYPES:
        want = tensors[spec.name]
        if spec.datatype == "FP16":
            np.testing.assert_allclose(decoded[spec.name], want, rtol=1e-3)
        elif spec.datatype == "BYTES":  # JSON carries strings
            assert decoded[spec.name].tolist() == [b.decode() for b in want.tolist()]
        else:
            np.testing.assert_array_equal(decoded[spec.name], want)


def test_kserve_binary_decodes_to_the_generated_tensors() -> None:
    tensors = generate_tensors(ALL_TYPES, rows=3, seed=0, count=1)[0]
    body, header_len = encode_kserve_binary(ALL_TYPES, tensors)
    header, blob = _split_binary(body, header_len)
    assert header["parameters"] == {"binary_data_output": True}
    decoded = decode_v2_inputs(header["inputs"], blob)
    for spec in ALL_TYPES:
        np.testing.assert_array_equal(decoded[spec.name], tensors[spec.name])


def test_tf_row_format_single_and_multi_input() -> None:
    tensors = generate_tensors(IRIS, rows=5, seed=0, count=1)[0]
    doc = orjson.loads(encode_tf_json(IRIS, tensors))
    assert np.asarray(doc["instances"], dtype=np.float32).shape == (5, 4)
    np.testing.assert_array_equal(np.asarray(doc["instances"], dtype=np.float32), tensors["X"])
    two = [InputSpec("a", "INT64", (-1, 2)), InputSpec("b", "BYTES", (-1,))]
    tensors = generate_tensors(two, rows=3, seed=0, count=1)[0]
    doc = orjson.loads(encode_tf_json(two, tensors))
    assert len(doc["instances"]) == 3 and set(doc["instances"][0]) == {"a", "b"}
    inputs, rows = decode_predict(doc, ())
    assert rows and inputs["a"].shape == (3, 2)
    fixed = [InputSpec("a", "FP32", (2, 2))]
    doc = orjson.loads(encode_tf_json(fixed, generate_tensors(fixed, 1, 0, 1)[0]))
    assert "inputs" in doc  # no batch dimension: the columnar format


def test_csv_rows() -> None:
    tensors = generate_tensors(IRIS, rows=4, seed=0, count=1)[0]
    body = encode_csv(IRIS, tensors)
    assert body.count(b"\n") == 4
    np.testing.assert_allclose(decode_csv(body), tensors["X"], rtol=1e-6)
    with pytest.raises(ConfigError):
        encode_csv(ALL_TYPES, generate_tensors(ALL_TYPES, 1, 0, 1)[0])


@pytest.mark.parametrize(
    ("protocol", "extra", "path", "ctype"),
    [
        ("tfserving", {}, "/v1/models/iris/versions/2:predict", "application/json"),
        ("kserve", {}, "/v2/models/iris/versions/2/infer", "application/json"),
        ("kserve", {"binary": True}, "/v2/models/iris/versions/2/infer", "application/octet-stream"),
        ("sagemaker", {}, "/invocations", "application/json"),
        ("sagemaker", {"csv": True}, "/invocations", "text/csv"),
    ],
)
def test_workload_requests(protocol: Any, extra: dict[str, bool], path: str, ctype: str) -> None:
    spec = BenchSpec(url="http://h:9", model="iris", version=2, protocol=protocol, rows=2, **extra)  # type: ignore[arg-type]
    w = build_workload(spec, IRIS)
    assert w.path == path and w.headers["Content-Type"] == ctype
    assert w.rows == (2,) * DISTINCT_BODIES
    for req, body in zip(w.requests, w.bodies, strict=True):
        head, _, sent = req.partition(b"\r\n\r\n")
        assert sent == body
        lines = head.decode().split("\r\n")
        assert lines[0] == f"POST {path} HTTP/1.1"
        assert "Host: h:9" in lines and f"Content-Length: {len(body)}" in lines
        if protocol == "sagemaker":
            assert "X-Amzn-SageMaker-Custom-Attributes: tfs-model-name=iris,tfs-model-version=2" in lines
        if extra.get("binary"):
            n = int(next(x for x in lines if x.startswith("Inference-Header-Content-Length")).split(": ")[1])
            assert orjson.loads(body[:n])["inputs"][0]["shape"] == [2, 4]


def test_body_file_cycles_lines_and_counts_rows(tmp_path: Path) -> None:
    f = tmp_path / "bodies.jsonl"
    f.write_text('{"instances": [[1,2,3,4],[5,6,7,8]]}\n\n{"instances": [[1,2,3,4]]}\n')
    w = build_workload(BenchSpec(model="iris", body_file=str(f), rows=9), None)
    assert w.bodies == (b'{"instances": [[1,2,3,4],[5,6,7,8]]}', b'{"instances": [[1,2,3,4]]}')
    assert w.rows == (2, 1)
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(BenchError):
        build_workload(BenchSpec(model="iris", body_file=str(tmp_path / "empty")), None)
    with pytest.raises(BenchError):
        build_workload(BenchSpec(model="iris", body_file=str(tmp_path / "missing")), None)


def test_count_rows() -> None:
    assert (
        count_rows(b'{"inputs": [{"name": "X", "shape": [3, 4], "datatype": "FP32", "data": []}]}', "kserve", False)
        == 3
    )
    assert count_rows(b'{"inputs": {"X": [[1], [2]]}}', "tfserving", False) == 2
    assert count_rows(b"[[1, 2], [3, 4]]", "sagemaker", False) == 2
    assert count_rows(b"1,2,3,4", "sagemaker", True) == 1
    assert count_rows(b"not json", "tfserving", False) is None


def test_durations_levels_and_targets() -> None:
    assert parse_duration("10s") == 10.0
    assert parse_duration("250ms") == 0.25
    assert parse_duration("2m") == 120.0
    assert parse_duration("1.5") == 1.5
    with pytest.raises(ConfigError):
        parse_duration("soon")
    assert parse_levels("100, 500,1000") == (100.0, 500.0, 1000.0)
    with pytest.raises(ConfigError):
        parse_levels("1,0")
    assert Target.from_url("localhost:8501") == Target("localhost", 8501, False)
    assert Target.from_url("https://h").authority == "h"
    with pytest.raises(ConfigError):
        Target.from_url("http://h:1/v1")


def _options(**kw: Any) -> BenchSpec:
    base: dict[str, Any] = {
        "url": "http://127.0.0.1:8501",
        "protocol": "tfserving",
        "model": "m",
        "version": None,
        "rows": 1,
        "concurrency": None,
        "rate": None,
        "loop": None,
        "duration": None,
        "requests": None,
        "phases": None,
        "phase_duration": None,
        "max_outstanding": 1024,
        "body_file": None,
        "seed": 0,
        "binary": False,
        "csv": False,
        "headers": [],
        "timeout": "30s",
        "engine": "asyncio",
    }
    return spec_from_options(**(base | kw))


def test_options_pick_the_loop_and_levels() -> None:
    s = _options()
    assert (s.loop, s.levels, s.duration_s, s.requests) == ("closed", (1.0,), 10.0, None)
    s = _options(rate=200.0, requests=50)
    assert (s.loop, s.levels, s.duration_s, s.requests) == ("open", (200.0,), None, 50)
    s = _options(phases="100,500", loop="open", phase_duration="2s")
    assert (s.loop, s.levels, s.duration_s) == ("open", (100.0, 500.0), 2.0)
    s = _options(phases="1,8", duration="3s", headers=["Authorization: Bearer x"])
    assert (s.loop, s.levels, s.duration_s, s.headers) == ("closed", (1.0, 8.0), 3.0, (("Authorization", "Bearer x"),))


@pytest.mark.parametrize(
    "kw",
    [
        {"rate": 10.0, "loop": "closed"},
        {"concurrency": 4, "loop": "open"},
        {"loop": "open"},
        {"phases": "1,2", "concurrency": 2},
        {"phase_duration": "1s"},
        {"rate": -1.0},
        {"phases": "1.5", "loop": "closed"},
        {"engine": "wrk", "rate": 10.0},
        {"engine": "wrk", "requests": 10},
        {"engine": "gatling"},
        {"binary": True},
        {"csv": True},
        {"protocol": "grpc"},
        {"model": ""},
        {"rows": 0},
        {"headers": ["no colon"]},
        {"protocol": "kserve", "binary": True, "body_file": "x"},
    ],
)
def test_options_refuse_contradictions(kw: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        _options(**kw)


def test_csv_goes_with_an_endpoint_name_which_is_invokeendpoint() -> None:
    """``--endpoint-name NAME --csv``: an endpoint name means InvokeEndpoint, SageMaker's bodies (issue 46, item 10);
    --csv against the TF Serving protocol is still refused, naming both ways to use it."""
    from servekit.tools.bench.dynamic import invoke_endpoint

    spec = BenchSpec(endpoint_name="churn", csv=True, engine="asyncio")
    assert invoke_endpoint(spec)[1]["Content-Type"] == "text/csv"
    with pytest.raises(ConfigError, match="--protocol sagemaker or --endpoint-name"):
        BenchSpec(model="iris", csv=True)
