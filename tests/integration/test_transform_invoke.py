"""Invoking the model: in process it answers byte for byte as ``/invocations`` does; over HTTP it retries the
transient failures within a timeout; the JSON Lines fast paths equal the adapter's codecs."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from starlette.testclient import TestClient

from servekit.errors import ErrorCode, ServekitError
from servekit.services.transform.invoke import HttpInvoker, RuntimeInvoker, call_with_retries
from servekit.serving.codecs.sagemaker import decode_jsonlines as adapter_decode
from servekit.serving.codecs.sagemaker import decode_jsonlines_fast as decode_jsonlines
from servekit.serving.codecs.sagemaker import encode_jsonlines_fast as encode_jsonlines
from servekit.serving.codecs.sagemaker import rows as _rows
from servekit.serving.runtime.registry import RuntimeRegistry
from servekit.serving.schema import InferenceResponse
from servekit.testing.transform import FlakyInvoker
from servekit.types import Signature, TensorSpec

ROWS = [[5.1, 3.5, 1.4, 0.2], [6.2, 2.9, 4.3, 1.3], [7.7, 3.0, 6.1, 2.3]]
BODIES = {
    "application/jsonlines": b"".join(orjson.dumps(r) + b"\n" for r in ROWS),
    "application/json": orjson.dumps(ROWS),
    "text/csv": b"".join(b",".join(str(v).encode() for v in r) + b"\n" for r in ROWS),
}


CASES = [
    (model, version, content_type)
    for model, version in (("iris", 2), ("iris_sklearn", 1), ("iris_handler", 1))
    for content_type in sorted(BODIES)
    if not (model == "iris_handler" and content_type == "application/jsonlines")  # it reads JSON and CSV only
]


@pytest.mark.parametrize("accept", ["application/jsonlines", "application/json"])
@pytest.mark.parametrize(("model", "version", "content_type"), CASES)
def test_in_process_equals_invocations(
    client: TestClient, demo_repo: Path, model: str, version: int, content_type: str, accept: str
) -> None:
    body = BODIES[content_type]
    headers = {
        "Content-Type": content_type,
        "Accept": accept,
        "X-Amzn-SageMaker-Custom-Attributes": f"tfs-model-name={model},tfs-model-version={version}",
    }
    http = client.post("/invocations", content=body, headers=headers)
    assert http.status_code == 200, http.text
    invoker = RuntimeInvoker(RuntimeRegistry().load(demo_repo / model / str(version)), model)
    assert invoker.invoke(body, content_type, accept) == http.content


def test_in_process_errors_carry_codes(demo_repo: Path) -> None:
    invoker = RuntimeInvoker(RuntimeRegistry().load(demo_repo / "iris" / "2"), "iris")
    with pytest.raises(ServekitError) as bad:
        invoker.invoke(b'[1, 2, 3, 4]\n{"oops"\n', "application/jsonlines", "application/jsonlines")
    assert bad.value.code is ErrorCode.INVALID_ARGUMENT and "line 2" in bad.value.message
    with pytest.raises(ServekitError) as media:
        invoker.invoke(b"x", "image/png", "application/json")
    assert media.value.code is ErrorCode.UNSUPPORTED_MEDIA_TYPE


# ---- retries ---------------------------------------------------------------------------------------------------


def test_transient_failures_are_retried_with_backoff() -> None:
    waits: list[float] = []
    flaky = FlakyInvoker(failures=3)
    assert call_with_retries(lambda: flaky.invoke(b"a\n", "text/csv", "text/csv"), 3, waits.append) == b"a\n"
    assert flaky.calls == 4 and waits == [0.1, 0.2, 0.4]
    exhausted = FlakyInvoker(failures=5)
    with pytest.raises(ServekitError, match="after 4 attempts"):
        call_with_retries(lambda: exhausted.invoke(b"a\n", "text/csv", "text/csv"), 3, waits.append)
    assert exhausted.calls == 4


def test_client_errors_are_not_retried() -> None:
    bad = FlakyInvoker(failures=1, code=ErrorCode.INVALID_ARGUMENT)
    with pytest.raises(ServekitError):
        call_with_retries(lambda: bad.invoke(b"a\n", "text/csv", "text/csv"), 3, lambda s: None)
    assert bad.calls == 1


# ---- HTTP ------------------------------------------------------------------------------------------------------


class Script:
    def __init__(self) -> None:
        self.statuses: list[int] = []
        self.seen: list[tuple[str, str, bytes]] = []
        self.release = threading.Event()


@pytest.fixture
def server() -> Iterator[tuple[str, Script]]:
    script = Script()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            script.seen.append((self.path, self.headers["Content-Type"], body))
            status = script.statuses.pop(0) if script.statuses else 200
            if status == 0:  # hold the answer until the test lets go (the client times out first)
                script.release.wait(10)
                status = 200
            out = body.upper() if status == 200 else b"nope"
            self.send_response(status)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", script
    script.release.set()
    httpd.shutdown()
    httpd.server_close()


def test_http_invoker_posts_to_invocations_and_retries(server: tuple[str, Script]) -> None:
    url, script = server
    invoker = HttpInvoker(url, timeout_s=5)
    script.statuses = [503, 500]
    assert call_with_retries(lambda: invoker.invoke(b"abc", "text/csv", "text/csv"), 3, lambda s: None) == b"ABC"
    assert [s[0] for s in script.seen] == ["/invocations"] * 3 and script.seen[0][1] == "text/csv"
    script.statuses = [400]
    with pytest.raises(ServekitError) as bad:
        call_with_retries(lambda: invoker.invoke(b"abc", "text/csv", "text/csv"), 3, lambda s: None)
    assert bad.value.code is ErrorCode.INVALID_ARGUMENT and "answered 400: nope" in bad.value.message
    assert len(script.seen) == 4  # no retry of a client error
    invoker.close()


def test_http_invoker_times_out(server: tuple[str, Script]) -> None:
    url, script = server
    script.statuses = [0]
    invoker = HttpInvoker(url + "/invocations", timeout_s=0.2)
    with pytest.raises(ServekitError) as slow:
        invoker.invoke(b"abc", "text/csv", "text/csv")
    assert slow.value.code is ErrorCode.DEADLINE_EXCEEDED
    script.release.set()
    assert invoker.invoke(b"abc", "text/csv", "text/csv") == b"ABC"  # a fresh connection after the timeout
    invoker.close()


def test_unreachable_endpoint_is_unavailable() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ServekitError) as down:
        HttpInvoker(f"http://127.0.0.1:{port}", 1).invoke(b"a", "text/csv", "text/csv")
    assert down.value.code is ErrorCode.UNAVAILABLE


# ---- fast paths ------------------------------------------------------------------------------------------------


def adapter_encode(outputs: dict[str, Any]) -> bytes:
    resp = InferenceResponse("m", 1, "s", outputs)
    return b"".join(orjson.dumps(r, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n" for r in _rows(resp))


RNG = np.random.default_rng(7)


@pytest.mark.parametrize(
    "outputs",
    [
        {"y": RNG.normal(size=(40, 10)).astype(np.float32)},
        {"y": RNG.normal(size=(40,)).astype(np.float32)},
        {"y": RNG.normal(size=(40, 3))},
        {"y": RNG.integers(-9, 9, size=(40, 2)).astype(np.int32)},
        {"y": np.array([[np.nan, np.inf, -0.0, 1e-40, 3e38]], dtype=np.float32)},
        {"y": np.asfortranarray(RNG.normal(size=(5, 3)))},
        {"y": RNG.normal(size=(4, 3)).astype(np.float16)},
        {"label": RNG.integers(0, 3, size=40), "probabilities": RNG.random(size=(40, 3)).astype(np.float32)},
        {"a": RNG.random(40).astype(np.float32), "b%s": RNG.random(size=(40, 2)), "c": RNG.random(40) > 0.5},
    ],
    ids=lambda o: "+".join(f"{k}:{v.dtype}{list(v.shape)}" for k, v in o.items()),
)
def test_fast_jsonlines_encoding_equals_the_adapter(outputs: dict[str, Any]) -> None:
    assert encode_jsonlines(outputs) == adapter_encode(outputs)


def test_fast_encoding_declines_what_it_cannot_do() -> None:
    assert encode_jsonlines({"y": np.array(["a", "b"], dtype=object)}) is None
    assert encode_jsonlines({"y": np.zeros((2, 2, 2))}) is None
    assert encode_jsonlines({"a": np.zeros(2), "b": np.zeros(3)}) is None


@pytest.mark.parametrize(
    "body", [b"[1,2]\n[3,4]\n", b"[1]\n\n[2]\n", b"[NaN]\n", b"1\n2", b"\n", b"{bad\n", b"[1]\r\n"]
)
def test_fast_jsonlines_decoding_equals_the_adapter(body: bytes) -> None:
    def outcome(fn: Any) -> Any:
        try:
            return repr(fn(body))
        except ServekitError as exc:
            return exc.message

    assert outcome(decode_jsonlines) == outcome(adapter_decode)


def test_long_bodies_reach_the_model_in_parts(demo_repo: Path) -> None:
    def pair(model: str, version: int) -> tuple[RuntimeInvoker, RuntimeInvoker]:
        servable = RuntimeRegistry().load(demo_repo / model / str(version))
        return RuntimeInvoker(servable, model, rows_per_call=7), RuntimeInvoker(servable, model, rows_per_call=0)

    rows = (ROWS * 20)[:50]
    bodies = {
        "application/jsonlines": b"".join(orjson.dumps(r) + b"\n" for r in rows),
        "text/csv": b"".join(b",".join(str(v).encode() for v in r) + b"\n" for r in rows),
    }
    labels_parts, labels_whole = pair("iris_sklearn", 1)
    probs_parts, probs_whole = pair("iris", 2)
    for content_type, body in bodies.items():
        for accept in ("application/jsonlines", "text/csv"):  # class labels: the same bytes
            assert labels_parts.invoke(body, content_type, accept) == labels_whole.invoke(body, content_type, accept)
        got = [orjson.loads(x) for x in probs_parts.invoke(body, content_type, JSONL).splitlines()]
        want = [orjson.loads(x) for x in probs_whole.invoke(body, content_type, JSONL).splitlines()]
        assert [g["label"] for g in got] == [w["label"] for w in want]  # floats: equal to a few ulps
        assert np.allclose([g["probabilities"] for g in got], [w["probabilities"] for w in want], rtol=1e-5)
    # Rows that one call refuses are refused the same way when the parts alone would pass.
    ragged = b"".join(orjson.dumps(r) + b"\n" for r in [[1.0, 2.0, 3.0, 4.0]] * 7 + [[1.0, 2.0, 3.0]] * 7)
    with pytest.raises(ServekitError) as one:
        probs_whole.invoke(ragged, JSONL, JSONL)
    with pytest.raises(ServekitError) as split:
        probs_parts.invoke(ragged, JSONL, JSONL)
    assert split.value.message == one.value.message


JSONL = "application/jsonlines"


class AnyWidth:
    """Sums rows of any width: parts of a ragged body would each pass, one call must refuse it."""

    platform = "test"

    def __init__(self) -> None:
        self._sig = Signature(
            "serving_default", (TensorSpec("x", "FP64", (-1, -1)),), (TensorSpec("y", "FP64", (-1,)),)
        )

    @property
    def signatures(self) -> dict[str, Signature]:
        return {"serving_default": self._sig}

    def predict(self, signature: str, inputs: Any) -> dict[str, Any]:
        return {"y": np.asarray(inputs["x"]).sum(axis=1)}

    def unload(self) -> None:
        pass


def test_parts_with_different_row_shapes_fall_back_to_one_call() -> None:
    parts = RuntimeInvoker(AnyWidth(), "sum", rows_per_call=2)
    assert parts.invoke(b"[1,2]\n[3,4]\n[5,6]\n", JSONL, JSONL) == b"3.0\n7.0\n11.0\n"
    with pytest.raises(ServekitError, match="ragged"):
        parts.invoke(b"[1,2]\n[3,4]\n[5,6,7]\n[8,9,10]\n", JSONL, JSONL)


@pytest.mark.parametrize(
    "lines",
    [
        [orjson.dumps(r) for r in ROWS * 5],
        [b"[1, 2, 3, 4]", b"[NaN, 1, 2, 3]"],
        [b"[1, 2, 3, 4]", b"{oops"],
        [b'["a", "b", "c", "d"]'],
    ],
    ids=["rows", "nan", "malformed", "strings"],
)
def test_records_as_lines_answer_as_the_joined_body(demo_repo: Path, lines: list[bytes]) -> None:
    invoker = RuntimeInvoker(RuntimeRegistry().load(demo_repo / "iris" / "2"), "iris", rows_per_call=4)

    def outcome(fn: Any, arg: Any) -> Any:
        try:
            return fn(arg, JSONL, JSONL)
        except ServekitError as exc:
            return exc.message

    assert outcome(invoker.invoke_lines, lines) == outcome(invoker.invoke, b"\n".join(lines) + b"\n")
