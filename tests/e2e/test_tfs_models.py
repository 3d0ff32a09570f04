"""SageMaker's TensorFlow Serving models on a real ``servekit up`` through boto3 (issue 45, the SDK's
TensorFlowModel.deploy path): a model.tar.gz in TF Serving's layout (``<model>/<version>/saved_model.pb``, as the
SDK's own test model is) deployed with the tensorflow-inference image answers TF Serving's JSON
(``{"instances": …}`` in, ``{"predictions": …}`` out)."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

tf = pytest.importorskip("tensorflow")

from servekit.testing.hosting import UpProcess  # noqa: E402

pytestmark = [pytest.mark.e2e, pytest.mark.extras]
FAST = {"Delay": 1, "MaxAttempts": 180}
BUCKET = "sagemaker-us-east-1-000000000000"
IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/tensorflow-inference:2.19-cpu"


def _half_plus_three(path: Path) -> None:
    class HalfPlusThree(tf.Module):  # type: ignore[misc]
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def serve(self, x: object) -> object:
            return {"y": x * 0.5 + 3.0}

    module = HalfPlusThree()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve})


def test_a_model_in_tf_servings_layout_answers_tf_servings_json(tmp_path: Path) -> None:
    _half_plus_three(tmp_path / "model" / "tfs-test-model" / "00000123")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(tmp_path / "model" / "tfs-test-model", arcname="tfs-test-model")
    up = UpProcess(tmp_path / "home")
    up.start()
    try:
        up.client("s3").put_object(Bucket=BUCKET, Key="tfs/model.tar.gz", Body=buf.getvalue())
        sm = up.sm()
        sm.create_model(
            ModelName="tfs", PrimaryContainer={"Image": IMAGE, "ModelDataUrl": f"s3://{BUCKET}/tfs/model.tar.gz"}
        )
        variant = {"VariantName": "AllTraffic", "ModelName": "tfs", "InitialInstanceCount": 1}
        sm.create_endpoint_config(
            EndpointConfigName="tfs", ProductionVariants=[{**variant, "InstanceType": "ml.m5.large"}]
        )
        sm.create_endpoint(EndpointName="tfs", EndpointConfigName="tfs")
        sm.get_waiter("endpoint_in_service").wait(EndpointName="tfs", WaiterConfig=FAST)
        out = up.rt().invoke_endpoint(
            EndpointName="tfs", Body=json.dumps({"instances": [1.0, 2.0, 5.0]}), ContentType="application/json"
        )
        assert json.loads(out["Body"].read()) == {"predictions": [3.5, 4.0, 5.5]}
    finally:
        up.stop()
