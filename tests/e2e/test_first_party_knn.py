"""SageMaker's first-party k-NN on a real ``servekit up`` through boto3 (issue 45), as the SDK's ``KNN`` and
``RecordSet`` drive it: RecordIO-protobuf channels with labels, ``test:accuracy`` reported without
MetricDefinitions, the artefact deployed with the ``knn`` image answering RecordIO-protobuf and JSON (verbose
too) with each row's predicted label."""

from __future__ import annotations

import json
from collections.abc import Iterator

import botocore.exceptions
import numpy as np
import pytest

from servekit.serving.codecs import recordio_protobuf as rp
from servekit.testing.hosting import UpProcess

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
FAST = {"Delay": 1, "MaxAttempts": 180}
BUCKET = "sagemaker-us-east-1-000000000000"
IMAGE = "382416733822.dkr.ecr.us-east-1.amazonaws.com/knn:1"
ROLE = "arn:aws:iam::000000000000:role/SageMakerRole"
CENTERS = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    u = UpProcess(tmp_path_factory.mktemp("knn") / "home")
    u.start()
    try:
        yield u
    finally:
        u.stop()


def _points(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(3), n)
    return (CENTERS[labels] + rng.normal(0, 0.5, size=(3 * n, 2))).astype(np.float32), labels.astype(np.float32)


def _train(sm: object, name: str, **hps: str) -> None:
    channels = [
        {
            "ChannelName": ch,
            "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": f"s3://{BUCKET}/knn/{ch}"}},
        }
        for ch in ("train", "test")
    ]
    base = {"k": "5", "sample_size": "40", "predictor_type": "classifier", "feature_dim": "2"}
    sm.create_training_job(  # type: ignore[attr-defined]
        TrainingJobName=name,
        RoleArn=ROLE,
        AlgorithmSpecification={"TrainingImage": IMAGE, "TrainingInputMode": "File"},
        HyperParameters={**base, **hps},
        InputDataConfig=channels,
        OutputDataConfig={"S3OutputPath": f"s3://{BUCKET}/knn-output"},
        ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 10},
        StoppingCondition={"MaxRuntimeInSeconds": 600},
    )


def test_knn_keeps_a_sample_reports_accuracy_and_serves_predicted_labels(up: UpProcess) -> None:
    s3, sm, rt = up.client("s3"), up.sm(), up.rt()
    s3.put_object(Bucket=BUCKET, Key="knn/train/part-0", Body=rp.write(*_points(30, 1)))
    s3.put_object(Bucket=BUCKET, Key="knn/test/part-0", Body=rp.write(*_points(5, 2)))
    _train(sm, "knn-bad", index_type="faiss.IVFPQ", index_metric="INNER_PRODUCT")
    _train(sm, "knn-1", index_type="faiss.IVFFlat")
    with pytest.raises(botocore.exceptions.WaiterError):
        sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="knn-bad", WaiterConfig=FAST)
    reason = sm.describe_training_job(TrainingJobName="knn-bad")["FailureReason"]
    assert reason == "ClientError: index_metric INNER_PRODUCT is not supported with index_type faiss.IVFPQ"
    sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="knn-1", WaiterConfig=FAST)
    d = sm.describe_training_job(TrainingJobName="knn-1")
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    assert {m["MetricName"]: m["Value"] for m in d["FinalMetricDataList"]} == {"test:accuracy": 1.0}

    sm.create_model(
        ModelName="knn-1",
        PrimaryContainer={"Image": IMAGE, "ModelDataUrl": d["ModelArtifacts"]["S3ModelArtifacts"]},
        ExecutionRoleArn=ROLE,
    )
    variant = {
        "VariantName": "AllTraffic",
        "ModelName": "knn-1",
        "InitialInstanceCount": 1,
        "InstanceType": "ml.m5.large",
    }
    sm.create_endpoint_config(EndpointConfigName="knn-1", ProductionVariants=[variant])
    sm.create_endpoint(EndpointName="knn-1", EndpointConfigName="knn-1")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="knn-1", WaiterConfig=FAST)
    out = rt.invoke_endpoint(
        EndpointName="knn-1",
        Body=rp.write(CENTERS.astype(np.float32)),
        ContentType=rp.CONTENT_TYPE,
        Accept=rp.CONTENT_TYPE,
    )
    labels = []
    for payload in rp.frames(out["Body"].read()):
        record = rp.Record()
        record.ParseFromString(payload)
        labels.append(list(record.label["predicted_label"].float32_tensor.values))
    assert labels == [[0.0], [1.0], [2.0]]
    body = json.dumps({"instances": [{"features": [9.5, 0.5]}]})
    answer = rt.invoke_endpoint(
        EndpointName="knn-1", Body=body, ContentType="application/json", Accept="application/json; verbose=true"
    )
    prediction = json.loads(answer["Body"].read())["predictions"][0]
    assert prediction["predicted_label"] == 1.0 and prediction["labels"] == [1.0] * 5
    assert len(prediction["distances"]) == 5 and prediction["distances"] == sorted(prediction["distances"])
