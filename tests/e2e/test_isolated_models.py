"""A model created with ``EnableNetworkIsolation`` (issue 44): its instances run in a network namespace of their
own, as SageMaker runs such a container with no network, and still answer InvokeEndpoint (the plane carries each
connection in). Its handler tries a port of this machine's loopback that is not the plane's: the isolated model
cannot reach it, the same model without isolation can (so the test can tell)."""

from __future__ import annotations

import json
import shutil
import socket
import textwrap
from pathlib import Path

import pytest

from servekit._utils import netns
from servekit.testing.hosting import UpProcess
from servekit.testing.users import as_ordinary_user, ordinary_user_home, why_not_ordinary_user

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not netns.available(), reason="this machine lets servekit make no network namespace"),
]
FAST = {"Delay": 1, "MaxAttempts": 120}
HANDLER = """
import json, os, socket

def model_fn(model_dir):
    return None

def input_fn(body, content_type):
    return json.loads(body)

def predict_fn(data, model):
    key = os.environ.get("AWS_ACCESS_KEY_ID", "")[:4]
    try:
        socket.create_connection(("127.0.0.1", data["port"]), timeout=5).close()
        return {"reached": True, "key": key}
    except OSError as exc:
        return {"reached": False, "key": key, "why": str(exc)}

def output_fn(answer, accept):
    return json.dumps(answer), "application/json"
"""


@pytest.mark.parametrize("user", ["as root", "as an ordinary user"])
def test_an_isolated_model_answers_but_reaches_nothing(tmp_path: Path, user: str) -> None:
    """servekit up as the tests' user (root in CI), and as an ordinary user where the machine allows."""
    if user == "as root":
        up = UpProcess(tmp_path / "home")
    else:
        why = why_not_ordinary_user()
        if why is not None:
            pytest.skip(why)
        tmp_path = ordinary_user_home()  # pytest's folders are root's (0700)
        up = UpProcess(tmp_path / "servekit", prefix=as_ordinary_user(tmp_path), user_home=tmp_path)
    model = tmp_path / "probe" / "1" / "code"
    model.mkdir(parents=True)
    (model / "inference.py").write_text(textwrap.dedent(HANDLER))
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
        assert answers["open"]["reached"] is True
        assert answers["isolated"]["reached"] is False, answers
        assert up.proc.poll() is None
        # batch transform runs the model's code in the run's process: the isolated model's run reaches the plane
        # (its input and output) and nothing else; both hold a session of the model's role, not the plane's key
        s3, bucket = up.client("s3"), "sagemaker-us-east-1-000000000000"
        with socket.create_server(("127.0.0.1", 0)) as other:
            s3.put_object(Bucket=bucket, Key="probe-in/x.json", Body=json.dumps({"port": other.getsockname()[1]}))
            for name in ("isolated", "open"):
                sm.create_transform_job(
                    TransformJobName=f"probe-{name}",
                    ModelName=name,
                    TransformInput={
                        "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": f"s3://{bucket}/probe-in"}},
                        "ContentType": "application/json",
                    },
                    TransformOutput={"S3OutputPath": f"s3://{bucket}/probe-out/{name}"},
                    TransformResources={"InstanceType": "ml.m5.large", "InstanceCount": 1},
                )
            for name in ("isolated", "open"):
                sm.get_waiter("transform_job_completed_or_stopped").wait(
                    TransformJobName=f"probe-{name}", WaiterConfig=FAST
                )
        for name, reached in (("isolated", False), ("open", True)):
            d = sm.describe_transform_job(TransformJobName=f"probe-{name}")
            assert d["TransformJobStatus"] == "Completed", d.get("FailureReason")
            out = json.loads(s3.get_object(Bucket=bucket, Key=f"probe-out/{name}/x.json.out")["Body"].read())
            assert (out["reached"], out["key"]) == (reached, "ASIA"), out
    finally:
        up.stop()
        if user != "as root":
            shutil.rmtree(tmp_path, ignore_errors=True)
