"""InvokeEndpointWithResponseStream through a real ``servekit up`` with boto3: a handler whose ``predict_fn`` yields
streams each piece as a PayloadPart as soon as it exists (the first part arrives while the model is still waiting
to produce the next), a model that raises midway ends the stream with a ModelStreamError boto3 raises, one that
fails before any output gets the ordinary ModelError, and the same model answers InvokeEndpoint with the whole
body (issue 29, response streaming)."""

from __future__ import annotations

import json
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest

from servekit.testing.hosting import UpProcess

pytestmark = pytest.mark.e2e
FAST = {"Delay": 1, "MaxAttempts": 120}
HANDLER = """
import json, os, time

def model_fn(model_dir):
    return None

def input_fn(body, content_type):
    return json.loads(body)

def predict_fn(data, model):
    if data.get("fail_before"):
        raise RuntimeError("no tokens today")
    for i in range(data["n"]):
        if i == 1 and data.get("gate"):  # the second piece waits until the client has seen the first
            deadline = time.monotonic() + 60
            while not os.path.exists(data["gate"]) and time.monotonic() < deadline:
                time.sleep(0.02)
        if data.get("fail_at") == i:
            raise RuntimeError("the stream broke")
        yield {"token": i}

def output_fn(piece, accept):
    return json.dumps(piece) + "\\n", "application/jsonlines"
"""


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[UpProcess, Path]]:
    tmp = tmp_path_factory.mktemp("streaming")
    up = UpProcess(tmp / "home")
    up.start()
    try:
        model = tmp / "tokens" / "1" / "code"
        model.mkdir(parents=True)
        (model / "inference.py").write_text(textwrap.dedent(HANDLER))
        sm = up.sm()
        sm.create_model(ModelName="tokens", PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(tmp / "tokens")})
        variant = {"VariantName": "AllTraffic", "ModelName": "tokens", "InitialInstanceCount": 1}
        sm.create_endpoint_config(
            EndpointConfigName="tokens", ProductionVariants=[{**variant, "InstanceType": "ml.m5.large"}]
        )
        sm.create_endpoint(EndpointName="tokens", EndpointConfigName="tokens")
        sm.get_waiter("endpoint_in_service").wait(EndpointName="tokens", WaiterConfig=FAST)
        yield up, tmp
    finally:
        up.stop()


def stream(up: UpProcess, body: dict[str, Any]) -> Any:
    return up.rt().invoke_endpoint_with_response_stream(
        EndpointName="tokens", Body=json.dumps(body), ContentType="application/json"
    )


def test_pieces_arrive_as_the_model_yields_them(endpoint: tuple[UpProcess, Path]) -> None:
    up, tmp = endpoint
    gate = tmp / "gate"
    answer = stream(up, {"n": 3, "gate": str(gate)})
    assert answer["ContentType"] == "application/jsonlines"
    assert answer["InvokedProductionVariant"] == "AllTraffic"
    events = iter(answer["Body"])
    first = next(events)
    # the model is blocked before its second piece until the gate exists: this part came while it was unfinished
    assert json.loads(first["PayloadPart"]["Bytes"]) == {"token": 0}
    assert not gate.exists()
    gate.write_text("go")
    rest = b"".join(e["PayloadPart"]["Bytes"] for e in events)
    assert [json.loads(line) for line in rest.splitlines()] == [{"token": 1}, {"token": 2}]


def test_a_model_that_breaks_midway_ends_the_stream_with_a_model_stream_error(endpoint: tuple[UpProcess, Path]) -> None:
    up, _ = endpoint
    answer = stream(up, {"n": 5, "fail_at": 2})
    seen = b""  # (pieces that arrive together may share a part)
    with pytest.raises(botocore.exceptions.EventStreamError) as broke:
        for event in answer["Body"]:
            seen += event["PayloadPart"]["Bytes"]
    assert [json.loads(line) for line in seen.splitlines()] == [{"token": 0}, {"token": 1}]
    assert broke.value.response["Error"]["Code"] == "ModelStreamError"
    # before any output: the ordinary error response, not a stream
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        stream(up, {"n": 1, "fail_before": True})
    assert refused.value.response["Error"]["Code"] == "ModelError"
    assert "no tokens today" not in str(refused.value)  # the model's own text stays in the server log


def test_the_same_model_answers_invoke_endpoint_with_the_whole_body(endpoint: tuple[UpProcess, Path]) -> None:
    up, _ = endpoint
    began = time.perf_counter()
    whole = up.rt().invoke_endpoint(EndpointName="tokens", Body=json.dumps({"n": 3}), ContentType="application/json")
    assert time.perf_counter() - began < 60
    lines = whole["Body"].read().splitlines()
    assert [json.loads(line) for line in lines] == [{"token": 0}, {"token": 1}, {"token": 2}]
    with pytest.raises(botocore.exceptions.ClientError) as unknown:
        up.rt().invoke_endpoint_with_response_stream(EndpointName="nope", Body=b"{}", ContentType="application/json")
    assert unknown.value.response["Error"]["Code"] == "ValidationError"
