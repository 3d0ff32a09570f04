"""Property-based fuzzing of every request decoder, against the in-process app with the demo models.

Whatever a client sends, the answer is either a success or a JSON ``{"error": "<message>"}`` with a 4xx
status; a 5xx is allowed only when the model itself raised (and then the message says so). After the
fuzzing, the same server still answers valid requests on every protocol.

Profiles (``SERVEKIT_FUZZ_PROFILE``): ``ci`` (the default: derandomized, a few hundred examples per test,
well under a minute on two cores) and ``deep`` (more examples, random seeds: a local hunt; add ``--timeout=0``
for more than ``deep`` runs, as pytest-timeout stops a test at 120 s).
"""

from __future__ import annotations

import io
import json
import os
import re
import struct
import warnings
from typing import Any
from urllib.parse import quote

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from numpy.testing import assert_array_equal
from starlette.testclient import TestClient

# On a failure Hypothesis's pytest plugin imports its patch writer, and libcst's DeprecationWarning at import
# becomes, under the suite's filterwarnings=error, an INTERNALERROR that hides the failing example: import it
# now with that warning ignored (a cached module is not imported again).
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    try:
        import hypothesis.extra._patching  # noqa: F401
    except ImportError:  # libcst is optional: without it the plugin skips the patch
        pass
PHASES = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink]  # no explain: faster
settings.register_profile(
    "ci",
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    phases=PHASES,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "deep",
    max_examples=1000,
    deadline=None,
    phases=PHASES,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# Applied per test (not loaded globally), so other modules' Hypothesis settings are left alone.
PROFILE = settings.get_profile(os.environ.get("SERVEKIT_FUZZ_PROFILE", "ci"))

ATTRS = "X-Amzn-SageMaker-Custom-Attributes"
MODELS = ["iris", "iris_sklearn", "iris_handler", "diabetes"]
MODEL_RAISED = re.compile(
    r"^(model '[^']*' version \d+ failed while running the request|the model's \w+ failed) \(request id [0-9a-f]+;"
)
V2_TYPES = ["BOOL", "UINT8", "INT8", "INT32", "INT64", "UINT64", "FP16", "FP32", "FP64", "BYTES"]
GOOD_ROW = [5.1, 3.5, 1.4, 0.2]


def check(r: Any) -> None:
    """The contract every answer keeps, whatever was sent."""
    if r.status_code < 300:
        return
    assert r.headers["content-type"] == "application/json", (r.status_code, r.content[:300])
    doc = r.json()
    assert isinstance(doc, dict) and list(doc) == ["error"], doc
    message = doc["error"]
    assert isinstance(message, str) and message.strip(), doc
    assert "internal server error" not in message, message
    if r.status_code >= 500:
        assert r.status_code == 500 and MODEL_RAISED.match(message), (r.status_code, message)
    else:
        assert 400 <= r.status_code < 500, (r.status_code, message)


# ---- strategies ---------------------------------------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=24,
)
numbers = (
    st.floats(allow_nan=True, allow_infinity=True, width=64)
    | st.integers(min_value=-(2**66), max_value=2**66)
    | st.sampled_from([0, 1, -1, 1e308, -1e308, 3.5e38, 65504.0, 10**30])
)
# Rows of roughly the right shape: the decoders' and validators' edge cases, not only garbage.
row_values = numbers | st.text(max_size=4) | st.none() | st.booleans() | st.just({"b64": "QQ=="})
rows = st.lists(st.lists(row_values, min_size=0, max_size=6), min_size=0, max_size=4)
depths = st.sampled_from([1025, 1300, 64, 65, 1000, 1024, 2])  # the limits: numpy's 64 dims, orjson's 1024
deep_lists = depths.map(lambda n: "[" * n + "]" * n)


def dump(value: Any) -> bytes:
    """JSON as a client would write it: NaN/Infinity tokens and lone surrogates (as \\ud800 escapes) allowed."""
    return json.dumps(value, allow_nan=True).encode()


@st.composite
def tf_bodies(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["rows", "columns", "examples", "any", "deep", "bytes"]))
    if kind == "bytes":
        return draw(st.binary(max_size=64))
    if kind == "deep":
        return b'{"instances": ' + draw(deep_lists).encode() + b"}"
    body: dict[str, Any]
    if kind == "rows":
        body = {"instances": draw(rows | json_values)}
    elif kind == "columns":
        body = {"inputs": draw(st.dictionaries(st.sampled_from(["X", "inputs", "x"]), rows, max_size=2) | rows)}
    elif kind == "examples":
        features = st.dictionaries(
            st.sampled_from(["x", "sepal_length", "sepal_width", "petal_length", "petal_width", "z"]),
            row_values | st.lists(row_values, max_size=11),
            max_size=5,
        )
        body = {"examples": draw(st.lists(features, max_size=3) | json_values)}
        if draw(st.booleans()):
            body["context"] = draw(features | json_values)
    else:
        body = draw(st.dictionaries(st.text(max_size=10), json_values, max_size=3))
    if draw(st.booleans()):
        body["signature_name"] = draw(
            st.sampled_from(["serving_default", "classify", "regress", "predict_proba"]) | json_values
        )
    return dump(body)


@st.composite
def v2_input(draw: st.DrawFn, binary: bool) -> tuple[dict[str, Any], bytes]:
    shape = draw(
        st.lists(st.integers(min_value=-2, max_value=6) | st.booleans() | st.sampled_from([2**62, 1.0]), max_size=4)
        | st.lists(st.just(1), min_size=60, max_size=70)
        | json_values
    )
    spec: dict[str, Any] = {
        "name": draw(st.sampled_from(["X", "inputs"]) | json_values),
        "shape": shape,
        "datatype": draw(st.sampled_from(V2_TYPES) | json_values),
    }
    payload = b""
    if binary:
        payload = draw(st.binary(max_size=48))
        size = draw(st.just(len(payload)) | st.integers(min_value=-4, max_value=64) | json_values)
        spec["parameters"] = {"binary_data_size": size}
    elif draw(st.integers(min_value=0, max_value=9)):
        spec["data"] = draw(st.lists(row_values, max_size=12) | rows | json_values)
    return spec, payload


@st.composite
def v2_requests(draw: st.DrawFn) -> tuple[bytes, dict[bytes, bytes]]:
    binary = draw(st.booleans())
    parts = draw(st.lists(v2_input(binary), min_size=0, max_size=3))
    body: dict[str, Any] = {"inputs": [spec for spec, _ in parts]}
    if draw(st.booleans()):
        body["outputs"] = draw(
            st.lists(st.fixed_dictionaries({"name": st.sampled_from(["label", "probabilities", "predictions"])}))
            | json_values
        )
    if draw(st.booleans()):
        body["parameters"] = draw(
            st.fixed_dictionaries({"signature_name": st.sampled_from(["serving_default", "classify"]) | json_values})
            | json_values
        )
    if draw(st.booleans()):
        body["id"] = draw(json_values)
    header = dump(body) if draw(st.integers(min_value=0, max_value=9)) else draw(st.binary(max_size=40))
    if not binary:
        return header, {b"content-type": b"application/json"}
    payload = b"".join(p for _, p in parts)
    length = draw(
        st.just(str(len(header)).encode())
        | st.integers(min_value=-5, max_value=len(header) + len(payload) + 5).map(lambda n: str(n).encode())
        | st.text(max_size=6).map(lambda t: t.encode())
    )
    return header + payload, {b"inference-header-content-length": length}


def _npy(arr: np.ndarray[Any, Any]) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


npy_dtypes = st.sampled_from(["<f8", "<f4", "<f2", "<i8", "|u1", "|b1", "<c16", "|V8", "<U3", "|S2", "<M8[s]"])


@st.composite
def npy_bodies(draw: st.DrawFn) -> bytes:
    shape = tuple(draw(st.lists(st.integers(min_value=0, max_value=5), max_size=3)))
    dtype = np.dtype(draw(npy_dtypes))
    body = _npy(np.zeros(shape, dtype=dtype))
    mutation = draw(st.sampled_from(["none", "header", "truncate", "bytes"]))
    if mutation == "header":  # rewrite the header dict's text, keeping its declared length
        end = 10 + struct.unpack("<H", body[8:10])[0]
        text = draw(
            st.sampled_from(
                [
                    "{'descr': '<f8', 'fortran_order': False, 'shape': (-1, 4), }",
                    "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }",
                    "{'descr': '<zz', 'fortran_order': False, 'shape': (1,), }",
                    "{'descr': '<f8', 'fortran_order': 3, 'shape': (1,), }",
                    "{'descr': '<f8', 'shape': (1,), }",
                    "{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (2,), }",
                    "{'descr': '<f8', 'fortran_order': False, 'shape': (1.5,), }",
                    "[1, 2]",
                    "[",
                ]
            )
            | st.text(max_size=40)
        ).encode("utf-8", "surrogatepass")[: end - 11]
        body = body[:10] + text + b" " * (end - 11 - len(text)) + b"\n" + body[end:]
    elif mutation == "truncate":
        body = body[: draw(st.integers(min_value=0, max_value=len(body)))]
    elif mutation == "bytes":
        body = b"\x93NUMPY" + draw(st.binary(max_size=80))
    return body


csv_cells = st.sampled_from(["1", "2.5", "-3e2", "nan", "inf", "x", "", '"4"', '"5', "1e400", "9" * 400, "\x00"])


@st.composite
def csv_bodies(draw: st.DrawFn) -> bytes:
    sep = draw(st.sampled_from(["\n", "\r", "\r\n", "\n\r"]))
    lines = draw(st.lists(st.lists(csv_cells, min_size=0, max_size=6), max_size=4))
    text = sep.join(",".join(cells) for cells in lines) + draw(st.sampled_from(["", sep]))
    if draw(st.integers(min_value=0, max_value=9)) == 0:
        text += "1" * 140_000  # over the csv module's field size limit
    return text.encode("utf-8", "surrogatepass")


@st.composite
def sagemaker_requests(draw: st.DrawFn) -> tuple[bytes, dict[bytes, bytes]]:
    ctype = draw(
        st.sampled_from(["application/json", "application/jsonlines", "text/csv", "application/x-npy"])
        | st.text(st.characters(blacklist_categories=["Cc", "Cs"]), max_size=12)
    )
    if ctype == "application/json":
        body = draw(tf_bodies() | st.builds(dump, json_values | rows))
    elif ctype == "application/jsonlines":
        lines = draw(
            st.lists(st.builds(dump, json_values | rows) | st.binary(max_size=10) | deep_lists.map(str.encode))
        )
        body = b"\n".join(lines)
    elif ctype == "text/csv":
        body = draw(csv_bodies())
    elif ctype == "application/x-npy":
        body = draw(npy_bodies())
    else:
        body = draw(st.binary(max_size=40))
    attrs = f"tfs-model-name={draw(st.sampled_from(MODELS))}"
    if draw(st.booleans()):
        attrs += f",tfs-method={draw(st.sampled_from(['predict', 'classify', 'regress']))}"
    if draw(st.integers(min_value=0, max_value=4)) == 0:
        attrs += f",tfs-model-version={draw(versions)}"
    headers = {
        b"content-type": ctype.encode("utf-8", "surrogatepass"),
        ATTRS.lower().encode(): attrs.encode("utf-8", "surrogatepass"),
    }
    if draw(st.booleans()):
        headers[b"accept"] = draw(
            st.sampled_from([b"application/json", b"application/jsonlines", b"text/csv", b"application/x-npy", b"*/*"])
        )
    return body, headers


versions = (
    st.integers(min_value=0, max_value=10).map(str)
    | st.text(alphabet="0123456789\u00b2\u00b3\u00b9\u0663\U0001d7d7", min_size=1, max_size=6)
    | st.integers(min_value=10, max_value=5000).map(lambda n: "9" * n)
    | st.text(st.characters(blacklist_categories=["Cc"], blacklist_characters=","), min_size=1, max_size=8)
)


# ---- properties ---------------------------------------------------------------------------------------


@PROFILE
@given(model=st.sampled_from(MODELS), verb=st.sampled_from(["predict", "classify", "regress"]), body=tf_bodies())
def test_tf_serving_bodies(client: TestClient, model: str, verb: str, body: bytes) -> None:
    check(client.post(f"/v1/models/{model}:{verb}", content=body))


@PROFILE
@given(model=st.sampled_from(MODELS), request=v2_requests())
def test_kserve_v2_bodies(client: TestClient, model: str, request: tuple[bytes, dict[bytes, bytes]]) -> None:
    body, headers = request
    check(client.post(f"/v2/models/{model}/infer", content=body, headers=headers))


@PROFILE
@given(request=sagemaker_requests())
def test_sagemaker_bodies(client: TestClient, request: tuple[bytes, dict[bytes, bytes]]) -> None:
    body, headers = request
    check(client.post("/invocations", content=body, headers=headers))


@PROFILE
@given(model=st.sampled_from(["iris", "nope"]), version=versions)
def test_versions_in_urls(client: TestClient, model: str, version: str) -> None:
    v = quote(version.encode("utf-8", "surrogatepass"), safe="")
    check(client.post(f"/v1/models/{model}/versions/{v}:predict", json={"instances": [GOOD_ROW]}))
    check(client.get(f"/v1/models/{model}/versions/{v}"))
    v2 = {"inputs": [{"name": "X", "shape": [1, 4], "datatype": "FP32", "data": GOOD_ROW}]}
    check(client.post(f"/v2/models/{model}/versions/{v}/infer", json=v2))
    check(client.get(f"/v2/models/{model}/versions/{v}"))


def test_the_server_still_serves_after_the_fuzzing(client: TestClient, iris_sklearn: Any) -> None:
    """Runs after the properties above (same module, same server)."""
    x = np.array([GOOD_ROW, [6.7, 3.0, 5.2, 2.3]])
    want = iris_sklearn.predict(x)
    tf = client.post("/v1/models/iris_sklearn:predict", json={"instances": x.tolist()})
    assert tf.status_code == 200, tf.text
    assert_array_equal(tf.json()["predictions"], want)
    v2 = client.post(
        "/v2/models/iris_sklearn/infer",
        json={"inputs": [{"name": "inputs", "shape": [2, 4], "datatype": "FP64", "data": x.tolist()}]},
    )
    assert v2.status_code == 200, v2.text
    assert_array_equal(v2.json()["outputs"][0]["data"], want)
    sm = client.post(
        "/invocations",
        content=b"5.1,3.5,1.4,0.2\r6.7,3.0,5.2,2.3\r",
        headers={ATTRS: "tfs-model-name=iris_sklearn", "Content-Type": "text/csv"},
    )
    assert sm.status_code == 200, sm.text
    assert_array_equal(sm.json()["predictions"], want)
    assert client.get("/ping").status_code == 200
    assert client.get("/v2/health/ready").status_code == 200
