"""Malformed requests across the three protocols: exact 4xx status and a JSON error that teaches.

Every case asserts the status, that the body is exactly ``{"error": "<message>"}``, and that the message
names what was expected (the input name and shape, the known models, the JSON position, ...). The last
test checks the server still answers a good request after the whole set.
"""

from __future__ import annotations

import io
import json
import struct
from typing import Any

import numpy as np
import pytest
from numpy.testing import assert_array_equal
from starlette.testclient import TestClient

MODELS = "models: diabetes, iris, iris_handler, iris_sklearn"
IRIS_SIG = "X: FP32[-1,4]"
ATTRS = "X-Amzn-SageMaker-Custom-Attributes"
SM_IRIS = {ATTRS: "tfs-model-name=iris"}
SM_SK = {ATTRS: "tfs-model-name=iris_sklearn"}
OVERSIZE = b"[" + b"1," * 500_000 + b"1]"  # 1_000_003 bytes of otherwise valid JSON
GOOD_ROW = [5.1, 3.5, 1.4, 0.2]
IRIS_FEATURES = {"sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2}


def _x(**override: Any) -> dict[str, Any]:
    return {"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32", "data": GOOD_ROW, **override}]}


def _binary(header: dict[str, Any], payload: bytes, declared_extra: int = 0) -> dict[str, Any]:
    raw = json.dumps(header).encode()
    return {
        "content": raw + payload,
        "headers": {"Inference-Header-Content-Length": str(len(raw) + declared_extra)},
    }


_BINARY_HEADER = {
    "inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32", "parameters": {"binary_data_size": 16}}]
}


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def _npy_header(header: bytes) -> bytes:
    """A version 1.0 .npy file whose header dict is ``header`` verbatim (padded as numpy pads it)."""
    text = header + b" " * (-(10 + len(header) + 1) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + b"\x00" * 32


DEEP = b"[" * 1100 + b"]" * 1100  # deeper than any JSON parser here nests (orjson: 1024, json: recursion limit)
HUGE_INT = b"9" * 400  # an integer no float holds
SM_HANDLER = {ATTRS: "tfs-model-name=iris_handler"}
SM_SK_JSON = {**SM_SK, "Content-Type": "application/json"}
SM_SK_NPY = {**SM_SK, "Content-Type": "application/x-npy"}
SK_SIG = "inputs: FP64[-1,4]"


def case(id: str, method: str, path: str, status: int, needles: list[str], **request: Any) -> Any:
    """One malformed request: ``request`` holds the client keyword arguments (json, content, headers)."""
    return pytest.param(method, path, request, status, needles, id=id)


CASES = [
    # ---- TF Serving REST ----------------------------------------------------------------------------
    case(
        "tf-malformed-json",
        "POST",
        "/v1/models/iris:predict",
        400,
        ["malformed JSON", "line 2 column 7"],
        content=b'{"instances": [[1, 2, 3, 4]],\n "x": }',
    ),
    case("tf-empty-body", "POST", "/v1/models/iris:predict", 400, ["empty", "expected JSON"], content=b""),
    case(
        "tf-instances-and-inputs",
        "POST",
        "/v1/models/iris:predict",
        400,
        ['exactly one of "instances"', '"inputs"'],
        json={"instances": [GOOD_ROW], "inputs": [GOOD_ROW]},
    ),
    case(
        "tf-ragged-instances",
        "POST",
        "/v1/models/iris:predict",
        400,
        ["ragged", "same length"],
        json={"instances": [GOOD_ROW, [1, 2, 3]]},
    ),
    case(
        "tf-wrong-width",
        "POST",
        "/v1/models/iris:predict",
        400,
        ["'X' has shape [1, 3]", "expected [-1, 4]", IRIS_SIG],
        json={"instances": [[1, 2, 3]]},
    ),
    case(
        "tf-string-in-numeric-input",
        "POST",
        "/v1/models/iris:predict",
        400,
        ["'X' must be numeric (FP32)", IRIS_SIG],
        json={"instances": [[5.1, "wide", 1.4, 0.2]]},
    ),
    case(
        "tf-unknown-input-name",
        "POST",
        "/v1/models/iris:predict",
        400,
        ["unexpected input(s) 'Z'", "missing input(s) 'X'", IRIS_SIG],
        json={"inputs": {"Z": [GOOD_ROW]}},
    ),
    case(
        "tf-missing-input",
        "POST",
        "/v1/models/iris:predict",
        400,
        ["missing input(s) 'X'", IRIS_SIG],
        json={"inputs": {}},
    ),
    case(
        "tf-b64-garbage",
        "POST",
        "/v1/models/iris_handler:predict",
        400,
        ["invalid base64"],
        json={"instances": [[{"b64": "@@not base64@@"}]]},
    ),
    case(
        "tf-b64-object-with-extra-keys",
        "POST",
        "/v1/models/iris:predict",
        400,
        ['{"b64": "<base64 string>"}'],
        json={"instances": [[{"b64": "QQ==", "x": 1}, 3.5, 1.4, 0.2]]},
    ),
    case(
        "tf-unknown-model",
        "POST",
        "/v1/models/nope:predict",
        404,
        ["'nope'", MODELS],
        json={"instances": [GOOD_ROW]},
    ),
    case(
        "tf-unknown-version",
        "POST",
        "/v1/models/iris/versions/9:predict",
        404,
        ["no version 9", "available versions: 1, 2"],
        json={"instances": [GOOD_ROW]},
    ),
    case(
        "tf-unknown-label",
        "POST",
        "/v1/models/iris/labels/beta:predict",
        404,
        ["'beta'", "labels: canary, stable"],
        json={"instances": [GOOD_ROW]},
    ),
    case(
        "tf-non-integer-version",
        "POST",
        "/v1/models/iris/versions/one:predict",
        400,
        ["'one'", "non-negative integer"],
        json={"instances": [GOOD_ROW]},
    ),
    case(
        "tf-unknown-signature",
        "POST",
        "/v1/models/iris:predict",
        404,
        ["'nah'", "signatures: classify, serving_default"],
        json={"instances": [GOOD_ROW], "signature_name": "nah"},
    ),
    case(
        "tf-classify-on-model-without-classify",
        "POST",
        "/v1/models/diabetes:classify",
        400,
        ["tensorflow/serving/classify", "signatures: predict, regress, serving_default"],
        json={"examples": [{"x": [0.0] * 10}]},
    ),
    case(
        "tf-classify-on-predict-signature",
        "POST",
        "/v1/models/iris:classify",
        400,
        ["'serving_default'", "tensorflow/serving/predict, not tensorflow/serving/classify"],
        json={"examples": [IRIS_FEATURES], "signature_name": "serving_default"},
    ),
    case(
        "tf-regress-on-classifier",
        "POST",
        "/v1/models/iris:regress",
        400,
        ["tensorflow/serving/regress", "signatures: classify, serving_default"],
        json={"examples": [IRIS_FEATURES]},
    ),
    case(
        "tf-example-unknown-feature",
        "POST",
        "/v1/models/iris:classify",
        400,
        ["unknown feature(s) ['color']", "'sepal_length', 'sepal_width', 'petal_length', 'petal_width'"],
        json={"examples": [{**IRIS_FEATURES, "color": 3}]},
    ),
    case(
        "tf-example-missing-feature",
        "POST",
        "/v1/models/iris:classify",
        400,
        ["lacks feature(s) ['petal_width']", "or one feature holding all 4 values"],
        json={"examples": [{k: v for k, v in IRIS_FEATURES.items() if k != "petal_width"}]},
    ),
    case(
        "tf-context-example-clash",
        "POST",
        "/v1/models/iris:classify",
        400,
        ["['sepal_length']", "both context and example 0"],
        json={"context": {"sepal_length": 5.0}, "examples": [IRIS_FEATURES]},
    ),
    case(
        "tf-unknown-verb",
        "POST",
        "/v1/models/iris:frobnicate",
        404,
        [":frobnicate", ":predict, :classify or :regress"],
        json={"instances": [GOOD_ROW]},
    ),
    case("tf-get-on-predict", "GET", "/v1/models/iris:predict", 400, [":predict needs POST, got GET"]),
    case(
        "tf-put-on-predict",
        "PUT",
        "/v1/models/iris:predict",
        405,
        ["PUT is not allowed on /v1/models/iris:predict"],
        json={"instances": [GOOD_ROW]},
    ),
    case(
        "tf-unknown-body-key",
        "POST",
        "/v1/models/iris:predict",
        400,
        ["['extra']", "allowed: ['inputs', 'instances', 'signature_name']"],
        json={"instances": [GOOD_ROW], "extra": 1},
    ),
    case(
        "tf-status-unknown-version",
        "GET",
        "/v1/models/iris/versions/5",
        404,
        ["no version 5", "versions: 1, 2"],
    ),
    case(
        "tf-oversize-body",
        "POST",
        "/v1/models/iris:predict",
        413,
        ["1000003 bytes", "limit of 1000000 bytes"],
        content=OVERSIZE,
    ),
    # ---- KServe V2 -----------------------------------------------------------------------------------
    case(
        "kv2-bad-datatype",
        "POST",
        "/v2/models/iris/infer",
        400,
        ["datatype 'FLOAT'", "'FP32'", "'BYTES'"],
        json=_x(datatype="FLOAT"),
    ),
    case(
        "kv2-shape-data-count-mismatch",
        "POST",
        "/v2/models/iris/infer",
        400,
        ["shape [2, 4] holds 8 elements", "data has 4"],
        json=_x(shape=[2, 4]),
    ),
    case(
        "kv2-negative-shape",
        "POST",
        "/v2/models/iris/infer",
        400,
        ["shape must be a list of non-negative integers", "[1, -4]"],
        json=_x(shape=[1, -4]),
    ),
    case(
        "kv2-string-in-fp32-data",
        "POST",
        "/v2/models/iris/infer",
        400,
        ["does not hold FP32 values", "'wide'"],
        json=_x(data=[5.1, "wide", 1.4, 0.2]),
    ),
    case(
        "kv2-fractional-int64-data",
        "POST",
        "/v2/models/iris/infer",
        400,
        ["'X'", "fractional", "INT64"],
        json=_x(datatype="INT64", data=[5.1, 3.5, 1.4, 0.2]),
    ),
    case(
        "kv2-uint8-out-of-range",
        "POST",
        "/v2/models/iris/infer",
        400,
        ["[0, 255]", "UINT8"],
        json=_x(datatype="UINT8", data=[300, 3, 1, 0]),
    ),
    case(
        "kv2-bool-not-0-or-1",
        "POST",
        "/v2/models/iris/infer",
        400,
        ["[0, 1]", "BOOL"],
        json=_x(datatype="BOOL", data=[2, 1, 0, 1]),
    ),
    case(
        "kv2-unknown-input-name",
        "POST",
        "/v2/models/iris/infer",
        400,
        ["unexpected input(s) 'Y'", "missing input(s) 'X'", IRIS_SIG],
        json={"inputs": [{"name": "Y", "shape": [1, 4], "datatype": "FP32", "data": GOOD_ROW}]},
    ),
    case(
        "kv2-wrong-width",
        "POST",
        "/v2/models/iris/infer",
        400,
        ["'X' has shape [2, 2]", "expected [-1, 4]"],
        json=_x(shape=[2, 2]),
    ),
    case(
        "kv2-input-twice",
        "POST",
        "/v2/models/iris/infer",
        400,
        ["input 'X' is given twice"],
        json={"inputs": _x()["inputs"] * 2},
    ),
    case(
        "kv2-no-inputs",
        "POST",
        "/v2/models/iris/infer",
        400,
        ['non-empty "inputs" list'],
        json={"inputs": []},
    ),
    case(
        "kv2-no-data",
        "POST",
        "/v2/models/iris/infer",
        400,
        ["'X' has neither \"data\" nor a binary_data_size"],
        json={"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32"}]},
    ),
    case(
        "kv2-unknown-output",
        "POST",
        "/v2/models/iris/infer",
        400,
        ["unknown output(s) 'logits'", "label: INT64[-1]"],
        json={**_x(), "outputs": [{"name": "logits"}]},
    ),
    case(
        "kv2-unknown-signature",
        "POST",
        "/v2/models/iris/infer",
        404,
        ["'zzz'", "signatures: classify, serving_default"],
        json={**_x(), "parameters": {"signature_name": "zzz"}},
    ),
    case(
        "kv2-malformed-json",
        "POST",
        "/v2/models/iris/infer",
        400,
        ["malformed JSON", "line 1 column 13"],
        content=b'{"inputs": [',
    ),
    case(
        "kv2-binary-size-past-end",
        "POST",
        "/v2/models/iris/infer",
        400,
        ["binary_data_size 16", "8 bytes of binary data"],
        **_binary(_BINARY_HEADER, b"\x00" * 8),
    ),
    case(
        "kv2-binary-size-wrong-for-shape",
        "POST",
        "/v2/models/iris/infer",
        400,
        ["needs 16 bytes", "binary_data_size is 12"],
        **_binary(
            {"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32", "parameters": {"binary_data_size": 12}}]},
            b"\x00" * 12,
        ),
    ),
    case(
        "kv2-header-length-past-body",
        "POST",
        "/v2/models/iris/infer",
        400,
        ["Inference-Header-Content-Length", "no larger than the body"],
        **_binary(_BINARY_HEADER, b"\x00" * 16, declared_extra=100),
    ),
    case(
        "kv2-bytes-prefix-past-end",
        "POST",
        "/v2/models/iris_handler/infer",
        400,
        ["BYTES element 0 needs 200 bytes"],
        **_binary(
            {"inputs": [{"name": "inputs", "shape": [1], "datatype": "BYTES", "parameters": {"binary_data_size": 7}}]},
            struct.pack("<I", 200) + b"abc",
        ),
    ),
    case(
        "kv2-unknown-model",
        "POST",
        "/v2/models/nope/infer",
        404,
        ["'nope'", MODELS],
        json=_x(),
    ),
    case(
        "kv2-unknown-version",
        "POST",
        "/v2/models/iris/versions/7/infer",
        404,
        ["no version 7", "available versions: 1, 2"],
        json=_x(),
    ),
    case(
        "kv2-non-integer-version",
        "GET",
        "/v2/models/iris/versions/latest",
        400,
        ["'latest'", "non-negative integer"],
    ),
    case("kv2-get-on-infer", "GET", "/v2/models/iris/infer", 405, ["GET is not allowed on /v2/models/iris/infer"]),
    case("kv2-unknown-route", "GET", "/v2/repository/index", 404, ["no route for GET", "/v2/..."]),
    case(
        "kv2-oversize-body",
        "POST",
        "/v2/models/iris/infer",
        413,
        ["1000003 bytes", "limit of 1000000 bytes"],
        content=OVERSIZE,
    ),
    # ---- SageMaker -----------------------------------------------------------------------------------
    case(
        "sm-no-model-name",
        "POST",
        "/invocations",
        400,
        ["tfs-model-name=<model>", MODELS.replace("models: ", "")],
        json=[GOOD_ROW],
    ),
    case(
        "sm-unknown-model",
        "POST",
        "/invocations",
        404,
        ["'zzz'", MODELS],
        json=[GOOD_ROW],
        headers={ATTRS: "tfs-model-name=zzz"},
    ),
    case(
        "sm-unknown-version",
        "POST",
        "/invocations",
        404,
        ["no version 8", "available versions: 1, 2"],
        json=[GOOD_ROW],
        headers={ATTRS: "tfs-model-name=iris,tfs-model-version=8"},
    ),
    case(
        "sm-non-integer-version",
        "POST",
        "/invocations",
        400,
        ["tfs-model-version 'abc'", "non-negative integer"],
        json=[GOOD_ROW],
        headers={ATTRS: "tfs-model-name=iris,tfs-model-version=abc"},
    ),
    case(
        "sm-unknown-method",
        "POST",
        "/invocations",
        400,
        ["tfs-method 'explode'", "predict, classify, regress"],
        json=[GOOD_ROW],
        headers={ATTRS: "tfs-model-name=iris,tfs-method=explode"},
    ),
    case(
        "sm-malformed-json",
        "POST",
        "/invocations",
        400,
        ["malformed JSON", "line 1 column 12"],
        content=b"[[1, 2, 3, ]]",
        headers={**SM_IRIS, "Content-Type": "application/json"},
    ),
    case(
        "sm-json-object-without-instances",
        "POST",
        "/invocations",
        400,
        ['"instances" or "inputs"', "bare list"],
        json={"rows": [GOOD_ROW]},
        headers=SM_IRIS,
    ),
    case(
        "sm-csv-non-number",
        "POST",
        "/invocations",
        400,
        ["CSV line 2", "'wide' is not a number"],
        content=b"5.1,3.5,1.4,0.2\n6.0,wide,4.1,1.1\n",
        headers={**SM_SK, "Content-Type": "text/csv"},
    ),
    case(
        "sm-csv-ragged-rows",
        "POST",
        "/invocations",
        400,
        ["CSV line 3 has 3 columns", "line 1 has 4"],
        content=b"5.1,3.5,1.4,0.2\n6.0,2.7,4.1,1.1\n6.7,3.0,5.2\n",
        headers={**SM_SK, "Content-Type": "text/csv"},
    ),
    case(
        "sm-bad-npy",
        "POST",
        "/invocations",
        400,
        ["not a valid .npy array"],
        content=b"\x93NUMPY-garbage-bytes",
        headers={**SM_SK, "Content-Type": "application/x-npy"},
    ),
    case(
        "sm-jsonlines-bad-line",
        "POST",
        "/invocations",
        400,
        ["JSON Lines body (line 2)", "column 2"],
        content=b"[5.1, 3.5, 1.4, 0.2]\n{oops\n",
        headers={**SM_SK, "Content-Type": "application/jsonlines"},
    ),
    case(
        "sm-unsupported-content-type",
        "POST",
        "/invocations",
        415,
        ["'application/xml'", "application/json", "text/csv", "application/x-npy"],
        content=b"<rows/>",
        headers={**SM_SK, "Content-Type": "application/xml"},
    ),
    case(
        "sm-classify-needs-json",
        "POST",
        "/invocations",
        415,
        ["tfs-method=classify", 'application/json bodies with "examples"'],
        content=b"5.1,3.5,1.4,0.2\n",
        headers={ATTRS: "tfs-model-name=iris_sklearn,tfs-method=classify", "Content-Type": "text/csv"},
    ),
    case(
        "sm-unsupported-accept",
        "POST",
        "/invocations",
        406,
        ["'image/png'", "application/json, application/jsonlines, text/csv, application/x-npy"],
        json=[GOOD_ROW],
        headers={**SM_IRIS, "Accept": "image/png"},
    ),
    case(  # text/csv writes a column per output value (issue 30, item 10); a .npy array holds one tensor
        "sm-npy-accept-with-two-outputs",
        "POST",
        "/invocations",
        406,
        ["application/x-npy can carry one output", "returned 2", "application/json"],
        json=[GOOD_ROW],
        headers={**SM_IRIS, "Accept": "application/x-npy"},
    ),
    case(
        "sm-wrong-width",
        "POST",
        "/invocations",
        400,
        ["'inputs' has shape [1, 3]", "inputs: FP64[-1,4]"],
        json=[[1, 2, 3]],
        headers=SM_SK,
    ),
    case(
        "sm-handler-malformed-json",
        "POST",
        "/invocations",
        400,
        ["could not decode the body as application/json", "line 1 column 2"],
        content=b"{features: 1}",
        headers={ATTRS: "tfs-model-name=iris_handler", "Content-Type": "application/json"},
    ),
    case(
        "sm-oversize-body",
        "POST",
        "/invocations",
        413,
        ["1000003 bytes", "limit of 1000000 bytes"],
        content=OVERSIZE,
        headers={**SM_IRIS, "Content-Type": "application/json"},
    ),
    case("sm-get-on-invocations", "GET", "/invocations", 405, ["GET is not allowed on /invocations"]),
    case("sm-post-on-ping", "POST", "/ping", 405, ["POST is not allowed on /ping"]),
    # ---- Found by fuzzing: client input that used to raise an unhandled exception (a 500) -------------
    # a. JSON nested past the parsers' depth limit
    case(
        "tf-json-nested-too-deep",
        "POST",
        "/v1/models/iris:predict",
        400,
        ["request body", "more than 1024 levels deep"],
        content=b'{"instances": ' + DEEP + b"}",
    ),
    case(
        "tf-json-nested-too-deep-with-nan",  # NaN sends the body to the standard library's parser
        "POST",
        "/v1/models/iris:predict",
        400,
        ["request body", "more than 1024 levels deep"],
        content=b'{"x": NaN, "instances": ' + DEEP + b"}",
    ),
    case(
        "kv2-json-nested-too-deep",
        "POST",
        "/v2/models/iris/infer",
        400,
        ["inference request JSON", "more than 1024 levels deep"],
        content=b'{"inputs": ' + DEEP + b"}",
    ),
    case(
        "sm-json-nested-too-deep",
        "POST",
        "/invocations",
        400,
        ["more than 1024 levels deep"],
        content=DEEP,
        headers=SM_SK_JSON,
    ),
    case(
        "sm-jsonlines-nested-too-deep",
        "POST",
        "/invocations",
        400,
        ["JSON Lines body (line 2)", "more than 1024 levels deep"],
        content=b"[5.1, 3.5, 1.4, 0.2]\n" + DEEP + b"\n",
        headers={**SM_SK, "Content-Type": "application/jsonlines"},
    ),
    case(
        "tf-lists-deeper-than-a-tensor",
        "POST",
        "/v1/models/iris:predict",
        400,
        ["nests lists more than 64 levels deep"],
        json={"instances": json.loads(b"[" * 80 + b"1" + b"]" * 80)},
    ),
    # b. integers too big for a float
    case(
        "tf-integer-too-big-for-fp32",
        "POST",
        "/v1/models/iris:predict",
        400,
        ["input 'X' holds a number too large for FP32", IRIS_SIG],
        content=b'{"instances": [[' + HUGE_INT + b", 3.5, 1.4, 0.2]]}",
    ),
    case(
        "sm-integer-too-big-for-fp64",
        "POST",
        "/invocations",
        400,
        ["input 'inputs' holds a number too large for FP64", SK_SIG],
        content=b"[[" + HUGE_INT + b", 3.5, 1.4, 0.2]]",
        headers=SM_SK_JSON,
    ),
    case(
        "tf-integer-past-python-digit-limit",
        "POST",
        "/v1/models/iris:predict",
        400,
        ["cannot be parsed", "4300 digits"],
        content=b'{"instances": [[' + b"9" * 5000 + b", 3.5, 1.4, 0.2]]}",
    ),
    case(
        "kv2-finite-fp64-too-big-for-fp32",
        "POST",
        "/v2/models/iris/infer",
        400,
        ["input 'X' holds values outside the range of FP32", IRIS_SIG],
        json=_x(datatype="FP64", data=[1e300, 3.5, 1.4, 0.2]),
    ),
    # c. CSV the csv module refuses
    case(
        "sm-csv-field-over-the-size-limit",
        "POST",
        "/invocations",
        400,
        ["CSV line 2", "longer than 131072 characters"],
        content=b"5.1,3.5,1.4,0.2\n" + b"1" * 200_000 + b",3.5,1.4,0.2\n",
        headers={**SM_SK, "Content-Type": "text/csv"},
    ),
    # d. V2 shapes and datatypes of the wrong JSON type
    case(
        "kv2-boolean-in-shape",
        "POST",
        "/v2/models/iris/infer",
        400,
        ["shape must be a list of non-negative integers", "[True, 4]"],
        json=_x(shape=[True, 4]),
    ),
    case(
        "kv2-65-dimensions",
        "POST",
        "/v2/models/iris/infer",
        400,
        ["shape has 65 dimensions", "at most 64"],
        json=_x(shape=[1] * 61 + [1, 1, 1, 4]),
    ),
    case(
        "kv2-datatype-is-a-list",
        "POST",
        "/v2/models/iris/infer",
        400,
        ["datatype ['FP32'] is not one of", "'FP32'"],
        json=_x(datatype=["FP32"]),
    ),
    case(
        "kv2-boolean-binary-data-size",
        "POST",
        "/v2/models/iris/infer",
        400,
        ["binary_data_size True"],
        **_binary(
            {"inputs": [{"name": "X", "shape": [1, 1], "datatype": "BOOL", "parameters": {"binary_data_size": True}}]},
            b"\x01",
        ),
    ),
    # e. .npy bodies numpy reads but no model takes, or cannot read
    case(
        "sm-npy-void-dtype",
        "POST",
        "/invocations",
        400,
        ["the .npy array holds |V8 values", "boolean, integer, float or fixed-width string"],
        content=_npy(np.zeros((1, 4), dtype="V8")),
        headers=SM_SK_NPY,
    ),
    case(
        "sm-npy-structured-dtype",
        "POST",
        "/invocations",
        400,
        ["the .npy array holds", "kind 'V'"],
        content=_npy(np.zeros((1, 4), dtype=[("a", "<f8"), ("b", "<i4")])),
        headers=SM_SK_NPY,
    ),
    case(
        "sm-npy-negative-shape",
        "POST",
        "/invocations",
        400,
        ["shape [-1, 4]", "negative dimension"],
        content=_npy_header(b"{'descr': '<f8', 'fortran_order': False, 'shape': (-1, 4), }"),
        headers=SM_SK_NPY,
    ),
    case(
        "sm-npy-shape-overflowing-int64",
        "POST",
        "/invocations",
        400,
        ["shape [4294967296, 4294967296]", "body carries 32 bytes"],
        content=_npy_header(b"{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }"),
        headers=SM_SK_NPY,
    ),
    case(
        "sm-npy-complex-dtype",
        "POST",
        "/invocations",
        400,
        ["the .npy array holds complex128 values"],
        content=_npy(np.zeros((1, 4), dtype=np.complex128)),
        headers=SM_SK_NPY,
    ),
    # f. handler models (inference.py): the body must be text for their input_fn
    case(
        "sm-handler-json-not-utf8",
        "POST",
        "/invocations",
        400,
        ["application/json body is not UTF-8 text (byte 0)"],
        content=b"\xff\xfe[[5.1, 3.5, 1.4, 0.2]]",
        headers={**SM_HANDLER, "Content-Type": "application/json"},
    ),
    case(
        "sm-handler-csv-not-utf8",
        "POST",
        "/invocations",
        400,
        ["text/csv body is not UTF-8 text (byte 4)"],
        content=b"5.1,\xff,1.4,0.2\n",
        headers={**SM_HANDLER, "Content-Type": "text/csv"},
    ),
    case(
        "sm-handler-json-nested-too-deep",
        "POST",
        "/invocations",
        400,
        ["could not decode the body as application/json", "nested too deeply"],
        # the model's own input_fn calls json.loads, which recurses: far past any recursion limit a test run sets
        content=b"[" * 50_000 + b"]" * 50_000,
        headers={**SM_HANDLER, "Content-Type": "application/json"},
    ),
    # g. a lone surrogate ("\ud800" is valid JSON but not UTF-8) quoted in the error message
    case(
        "tf-lone-surrogate-signature",
        "POST",
        "/v1/models/iris:predict",
        404,
        ["no signature '\\ud800'", "signatures: classify, serving_default"],
        content=b'{"instances": [[5.1, 3.5, 1.4, 0.2]], "signature_name": "\\ud800"}',
    ),
    case(
        "kv2-lone-surrogate-signature",
        "POST",
        "/v2/models/iris/infer",
        404,
        ["no signature '\\ud800'", "signatures: classify, serving_default"],
        content=json.dumps({**_x(), "parameters": {"signature_name": "\ud800"}}).encode(),
    ),
    case(
        "sm-lone-surrogate-signature",
        "POST",
        "/invocations",
        404,
        ["no signature 'x\\ud800'"],
        content=b'{"instances": [[5.1, 3.5, 1.4, 0.2]], "signature_name": "x\\ud800"}',
        headers={**SM_IRIS, "Content-Type": "application/json"},
    ),
    # h. versions and lengths: ASCII digits of bounded length only
    case(
        "tf-superscript-version",
        "POST",
        "/v1/models/m/versions/%C2%B2:predict",
        400,
        ["version '²'", "non-negative integer"],
        json={"instances": [GOOD_ROW]},
    ),
    case(
        "tf-5000-digit-version",
        "POST",
        "/v1/models/iris/versions/" + "9" * 5000 + ":predict",
        400,
        ["version '9999", "non-negative integer"],
        json={"instances": [GOOD_ROW]},
    ),
    case(
        "sm-superscript-version",
        "POST",
        "/invocations",
        400,
        ["tfs-model-version", "non-negative integer"],
        json=[GOOD_ROW],
        headers={ATTRS: "tfs-model-name=iris,tfs-model-version=²".encode()},
    ),
    case(
        "kv2-superscript-header-length",
        "POST",
        "/v2/models/iris/infer",
        400,
        ["Inference-Header-Content-Length", "non-negative integer"],
        content=json.dumps(_x()).encode(),
        headers={"Inference-Header-Content-Length": "²".encode()},
    ),
    # i. data the model cannot take is the client's error (400), not a model failure (500)
    case(
        "tf-nan-to-sklearn",
        "POST",
        "/v1/models/iris_sklearn:predict",
        400,
        ["input 'inputs' holds NaN", "does not accept", SK_SIG],
        content=b'{"instances": [[NaN, 3.5, 1.4, 0.2]]}',
    ),
    case(
        "sm-infinity-to-sklearn",
        "POST",
        "/invocations",
        400,
        ["input 'inputs' holds Infinity", "does not accept", SK_SIG],
        content=b"[[5.1, Infinity, 1.4, 0.2]]",
        headers=SM_SK_JSON,
    ),
    case(
        "sm-csv-nan-to-sklearn",
        "POST",
        "/invocations",
        400,
        ["input 'inputs' holds NaN", SK_SIG],
        content=b"5.1,3.5,1.4,0.2\nnan,3.5,1.4,0.2\n",
        headers={**SM_SK, "Content-Type": "text/csv"},
    ),
    case(
        "tf-regress-nan-to-sklearn",
        "POST",
        "/v1/models/diabetes:regress",
        400,
        ["input 'inputs' holds NaN", "inputs: FP64[-1,10]"],
        content=b'{"examples": [{"x": [NaN, 0, 0, 0, 0, 0, 0, 0, 0, 0]}]}',
    ),
    case(
        "tf-handler-wrong-width",
        "POST",
        "/v1/models/iris_handler:predict",
        400,
        ["the input has shape [1, 3] but the model takes 4 features per row", "predict_fn raised ValueError"],
        json={"instances": [[5.1, 3.5, 1.4]]},
    ),
    case(
        "kv2-handler-wrong-width",
        "POST",
        "/v2/models/iris_handler/infer",
        400,
        ["the input has shape [2, 3] but the model takes 4 features per row"],
        json={"inputs": [{"name": "inputs", "shape": [2, 3], "datatype": "FP64", "data": [1, 2, 3, 4, 5, 6]}]},
    ),
    case(
        "sm-handler-wrong-width",
        "POST",
        "/invocations",
        400,
        ["the input has shape [1, 5] but the model takes 4 features per row"],
        json={"features": [[5.1, 3.5, 1.4, 0.2, 9.9]]},
        headers=SM_HANDLER,
    ),
    case(
        "tf-handler-nan",
        "POST",
        "/v1/models/iris_handler:predict",
        400,
        ["the input holds NaN or Infinity, which the model does not accept", "predict_fn raised ValueError"],
        content=b'{"instances": [[NaN, 3.5, 1.4, 0.2]]}',
    ),
]


def test_the_set_is_large_and_distinct() -> None:
    ids = [p.id for p in CASES]
    assert len(ids) >= 30
    assert len(set(ids)) == len(ids)
    assert {p.values[3] for p in CASES} >= {400, 404, 405, 406, 413, 415}


@pytest.mark.parametrize(("method", "path", "request_kwargs", "status", "needles"), CASES)
def test_malformed_request(
    client: TestClient, method: str, path: str, request_kwargs: dict[str, Any], status: int, needles: list[str]
) -> None:
    r = client.request(method, path, **request_kwargs)
    assert r.status_code == status, r.text
    assert 400 <= r.status_code < 500
    assert r.headers["content-type"] == "application/json"
    doc = r.json()
    assert isinstance(doc, dict)
    assert list(doc) == ["error"], doc
    message = doc["error"]
    assert isinstance(message, str)
    for needle in needles:
        assert needle in message, f"{needle!r} not in {message!r}"


def test_csv_with_cr_only_line_endings_parses(client: TestClient, iris_sklearn: Any) -> None:
    """Classic Mac line endings (CR alone) and CRLF are rows like LF; the csv module refused CR-only."""
    rows = np.array([GOOD_ROW, [6.7, 3.0, 5.2, 2.3]])
    want = iris_sklearn.predict(rows).tolist()
    for sep in (b"\r", b"\r\n", b"\n"):
        body = sep.join(b",".join(str(v).encode() for v in row) for row in rows.tolist()) + sep
        r = client.post("/invocations", content=body, headers={**SM_SK, "Content-Type": "text/csv"})
        assert r.status_code == 200, (sep, r.text)
        assert r.json()["predictions"] == want


def test_onnx_takes_non_finite_inputs(client: TestClient, iris_onnx: Any) -> None:
    """ONNX models take NaN/Infinity (onnxruntime computes with them): 200, and NaN results come back as
    JSON null, exactly what onnxruntime returns for the same input."""
    r = client.post("/v1/models/iris:predict", content=b'{"instances": [[NaN, 3.5, 1.4, 0.2]]}')
    assert r.status_code == 200, r.text
    want = iris_onnx(2, [[np.nan, 3.5, 1.4, 0.2]])
    (pred,) = r.json()["predictions"]
    assert pred["label"] == int(want["label"][0])
    assert pred["probabilities"] == [None if np.isnan(p) else pytest.approx(p) for p in want["probabilities"][0]]


def test_server_still_serves_after_the_bad_requests(client: TestClient, iris_sklearn: Any) -> None:
    """Runs after the parametrized set (same module, same server): nothing it sent broke the server."""
    rows = np.array([GOOD_ROW, [6.7, 3.0, 5.2, 2.3]])
    want = iris_sklearn.predict(rows)
    tf = client.post("/v1/models/iris_sklearn:predict", json={"instances": rows.tolist()})
    assert tf.status_code == 200, tf.text
    assert_array_equal(tf.json()["predictions"], want)
    v2 = client.post(
        "/v2/models/iris_sklearn/infer",
        json={"inputs": [{"name": "inputs", "shape": [2, 4], "datatype": "FP64", "data": rows.tolist()}]},
    )
    assert v2.status_code == 200, v2.text
    assert_array_equal(v2.json()["outputs"][0]["data"], want)
    sm = client.post("/invocations", json=rows.tolist(), headers=SM_SK)
    assert sm.status_code == 200, sm.text
    assert_array_equal(sm.json()["predictions"], want)
    assert client.get("/ping").status_code == 200
    assert client.get("/v2/health/ready").status_code == 200
