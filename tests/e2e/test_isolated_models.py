"""A model created with ``EnableNetworkIsolation`` (issue 44): its instances run in a network namespace of their
own, as SageMaker runs such a container with no network, and still answer InvokeEndpoint (the plane carries each
connection in). Its handler tries a port of this machine's loopback that is not the plane's: the isolated model
cannot reach it, the same model without isolation can (so the test can tell)."""

from __future__ import annotations

import json
import os
import socket
import textwrap
from pathlib import Path

import pytest

from servekit.testing.hosting import UpProcess

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="namespaces are made where servekit up runs as root"),
]
FAST = {"Delay": 1, "MaxAttempts": 120}
HANDLER = """
import json, socket

def model_fn(model_dir):
    return None

def input_fn(body, content_type):
    return json.loads(body)

def predict_fn(data, model):
    try:
        socket.create_connection(("127.0.0.1", data["port"]), timeout=5).close()
        return {"reached": True}
    except OSError as exc:
        return {"reached": False, "why": str(exc)}

def output_fn(answer, accept):
    return json.dumps(answer), "application/json"
"""


def test_an_isolated_model_answers_but_reaches_nothing(tmp_path: Path) -> None:
    model = tmp_path / "probe" / "1" / "code"
    model.mkdir(parents=True)
    (model / "inference.py").write_text(textwrap.dedent(HANDLER))
    up = UpProcess(tmp_path / "home")
    up.start()
    try:
        sm, rt = up.sm(), up.rt()
        for name, isolated in (("isolated", True), ("open", False)):
            container = {"Image": "servekit", "ModelDataUrl": str(tmp_path / "probe")}
            sm.create_model(ModelName=name, PrimaryContainer=container, EnableNetworkIsolation=isolated)
            assert sm.describe_model(ModelName=name)["EnableNetworkIsolation"] is isolated
            variant = {"VariantName": "AllTraffic", "ModelName": name, "InitialInstanceCount": 1}
            sm.create_endpoint_config(
                EndpointConfigName=name, ProductionVariants=[{**variant, "InstanceType": "ml.m5.large"}]
            )
            sm.create_endpoint(EndpointName=name, EndpointConfigName=name)
        answers = {}
        with socket.create_server(("127.0.0.1", 0)) as other:  # not the plane: the handler must not reach it
            for name in ("isolated", "open"):
                sm.get_waiter("endpoint_in_service").wait(EndpointName=name, WaiterConfig=FAST)
                body = json.dumps({"port": other.getsockname()[1]})
                got = rt.invoke_endpoint(EndpointName=name, Body=body, ContentType="application/json")
                answers[name] = json.loads(got["Body"].read())
        assert answers["open"] == {"reached": True}
        assert answers["isolated"]["reached"] is False, answers
        assert up.proc.poll() is None
    finally:
        up.stop()
