"""A SageMaker framework model on a real ``servekit up``, as ``Estimator.deploy()`` makes one after a training job:
model.tar.gz holds what the script saved in /opt/ml/model (model.joblib, no code/), sourcedir.tar.gz holds the
script, both in the plane's own S3; CreateModel names the scikit-learn image with SAGEMAKER_PROGRAM and
SAGEMAKER_SUBMIT_DIRECTORY. A script with only model_fn answers through the toolkit's default handlers (JSON and
CSV in and out); a script's own input_fn/output_fn are used; a script without model_fn is refused by CreateModel."""

from __future__ import annotations

import io
import json
import tarfile
import textwrap
from collections.abc import Iterator
from typing import Any

import boto3
import botocore.exceptions
import joblib
import numpy as np
import pytest
from sklearn.linear_model import LinearRegression

from servekit.aws import Credentials
from servekit.testing.hosting import UpProcess

pytestmark = pytest.mark.e2e
FAST = {"Delay": 1, "MaxAttempts": 120}
BUCKET = "sagemaker-us-east-1-000000000000"  # the SDK's default bucket, made by servekit up
IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"
TRAIN = textwrap.dedent(
    """
    import argparse
    import os

    import joblib
    from sklearn.linear_model import LinearRegression


    def model_fn(model_dir):
        return joblib.load(os.path.join(model_dir, "model.joblib"))


    if __name__ == "__main__":  # training: never run when the script is imported for serving
        parser = argparse.ArgumentParser()
        parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR"))
        args = parser.parse_args()
        raise SystemExit("training ran while serving")
    """
)
CUSTOM = TRAIN.replace(
    'if __name__ == "__main__":',
    textwrap.dedent(
        """
        def input_fn(body, content_type):
            return [[float(x) for x in row.split(";")] for row in json.loads(body)["rows"]]


        def output_fn(prediction, accept):
            return json.dumps({"scores": [round(float(p), 6) for p in prediction]}), "application/json"


        if __name__ == "__main__":"""
    ),
).replace("import os\n", "import json\nimport os\n")


def tar_gz(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    u = UpProcess(tmp_path_factory.mktemp("framework-up") / "home")
    u.start()
    try:
        yield u
    finally:
        u.stop()


@pytest.fixture(scope="module")
def trained(up: UpProcess, tmp_path_factory: pytest.TempPathFactory) -> tuple[LinearRegression, str]:
    """A small LinearRegression as a training job leaves it: s3://…/<job>/output/model.tar.gz."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(40, 2))
    est = LinearRegression().fit(X, X @ np.array([2.0, -1.0]) + 0.25)
    path = tmp_path_factory.mktemp("model") / "model.joblib"
    joblib.dump(est, path)
    s3(up).put_object(Bucket=BUCKET, Key="job-1/output/model.tar.gz", Body=tar_gz({"model.joblib": path.read_bytes()}))
    return est, f"s3://{BUCKET}/job-1/output/model.tar.gz"


def s3(up: UpProcess) -> Any:
    key = Credentials.load_or_create(up.home).admin
    return boto3.session.Session().client(
        "s3",
        endpoint_url=up.url,
        region_name="us-east-1",
        aws_access_key_id=key.access_key_id,
        aws_secret_access_key=key.secret_access_key,
    )


def deploy(up: UpProcess, name: str, model_data: str, script: str) -> None:
    """The sourcedir uploaded as the SDK does, then CreateModel + endpoint config + endpoint, waited InService."""
    key = f"{name}/source/sourcedir.tar.gz"
    s3(up).put_object(Bucket=BUCKET, Key=key, Body=tar_gz({"train.py": script.encode()}))
    sm = up.sm()
    sm.create_model(
        ModelName=name,
        PrimaryContainer={
            "Image": IMAGE,
            "ModelDataUrl": model_data,
            "Environment": {
                "SAGEMAKER_PROGRAM": "train.py",
                "SAGEMAKER_SUBMIT_DIRECTORY": f"s3://{BUCKET}/{key}",
                "SAGEMAKER_CONTAINER_LOG_LEVEL": "20",
                "SAGEMAKER_REGION": "us-east-1",
            },
        },
        ExecutionRoleArn="arn:aws:iam::000000000000:role/SageMakerRole",
    )
    variant = {"VariantName": "AllTraffic", "ModelName": name, "InitialInstanceCount": 1, "InstanceType": "ml.m5.large"}
    sm.create_endpoint_config(EndpointConfigName=name, ProductionVariants=[variant])
    sm.create_endpoint(EndpointName=name, EndpointConfigName=name)
    try:
        sm.get_waiter("endpoint_in_service").wait(EndpointName=name, WaiterConfig=FAST)
    except botocore.exceptions.WaiterError:
        reason = sm.describe_endpoint(EndpointName=name).get("FailureReason")
        raise AssertionError(f"endpoint {name} did not come up: {reason}\n{up.log.read_text()[-3000:]}") from None


def invoke(up: UpProcess, name: str, body: str, content_type: str, accept: str) -> tuple[str, str]:
    r = up.rt().invoke_endpoint(EndpointName=name, Body=body, ContentType=content_type, Accept=accept)
    return r["Body"].read().decode(), r["ContentType"]


def test_a_script_with_only_model_fn_is_served_by_the_default_handlers(
    up: UpProcess, trained: tuple[LinearRegression, str]
) -> None:
    est, model_data = trained
    deploy(up, "sklearn-default", model_data, TRAIN)
    rows = [[1, 2], [3, 4]]
    expected = est.predict(np.array(rows, dtype=float))
    body, ctype = invoke(up, "sklearn-default", json.dumps(rows), "application/json", "application/json")
    assert ctype == "application/json"
    np.testing.assert_allclose(json.loads(body), expected)
    body, ctype = invoke(up, "sklearn-default", "1,2\n3,4\n", "text/csv", "text/csv")
    assert ctype == "text/csv"
    np.testing.assert_allclose([float(x) for x in body.split()], expected)
    described = up.sm().describe_model(ModelName="sklearn-default")["PrimaryContainer"]
    assert described["Environment"]["SAGEMAKER_PROGRAM"] == "train.py" and described["Image"] == IMAGE


def test_a_scripts_own_input_fn_and_output_fn(up: UpProcess, trained: tuple[LinearRegression, str]) -> None:
    est, model_data = trained
    deploy(up, "sklearn-custom", model_data, CUSTOM)
    body, ctype = invoke(up, "sklearn-custom", json.dumps({"rows": ["1;2", "3;4"]}), "application/json", "*/*")
    assert ctype == "application/json"
    expected = est.predict(np.array([[1.0, 2.0], [3.0, 4.0]]))
    assert json.loads(body) == {"scores": [round(float(p), 6) for p in expected]}


def test_create_model_refuses_a_script_without_model_fn_or_a_missing_sourcedir(
    up: UpProcess, trained: tuple[LinearRegression, str]
) -> None:
    _, model_data = trained
    s3(up).put_object(Bucket=BUCKET, Key="bad/sourcedir.tar.gz", Body=tar_gz({"train.py": b"print('train')\n"}))
    sm = up.sm()
    for submit, reason in (
        (f"s3://{BUCKET}/bad/sourcedir.tar.gz", "SAGEMAKER_PROGRAM train.py defines no model_fn"),
        (f"s3://{BUCKET}/missing/sourcedir.tar.gz", f"SAGEMAKER_SUBMIT_DIRECTORY s3://{BUCKET}/missing/"),
    ):
        with pytest.raises(botocore.exceptions.ClientError) as info:
            sm.create_model(
                ModelName="bad",
                PrimaryContainer={
                    "Image": IMAGE,
                    "ModelDataUrl": model_data,
                    "Environment": {"SAGEMAKER_PROGRAM": "train.py", "SAGEMAKER_SUBMIT_DIRECTORY": submit},
                },
                ExecutionRoleArn="arn:aws:iam::000000000000:role/SageMakerRole",
            )
        assert info.value.response["Error"]["Code"] == "ValidationException"
        assert reason in info.value.response["Error"]["Message"]
