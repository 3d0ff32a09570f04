"""SageMaker's first-party Linear Learner on a real ``servekit up`` through boto3 (issue 45), as the SDK's
``LinearLearner`` and ``RecordSet`` drive it: RecordIO-protobuf train and validation channels with labels and a CSV
test channel (label first), ``test:*`` and ``validation:*`` metrics without MetricDefinitions, the artefact deployed
with the ``linear-learner`` image answering RecordIO-protobuf (``label["score"]``, ``label["predicted_label"]``) and
JSON (``{"predictions": [{"score": ..., "predicted_label": ...}]}``)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pytest

from servekit.serving.codecs import recordio_protobuf as rp
from servekit.testing.hosting import UpProcess

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
FAST = {"Delay": 1, "MaxAttempts": 180}
BUCKET = "sagemaker-us-east-1-000000000000"
IMAGE = "382416733822.dkr.ecr.us-east-1.amazonaws.com/linear-learner:1"
ROLE = "arn:aws:iam::000000000000:role/SageMakerRole"


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    u = UpProcess(tmp_path_factory.mktemp("linear-learner") / "home")
    u.start()
    try:
        yield u
    finally:
        u.stop()


def _data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3)).astype(np.float32)
    return x, (x @ np.array([2.0, -1.0, 0.5]) > 0).astype(np.float32)


def test_linear_learner_trains_on_records_reports_its_metrics_and_serves_scores(up: UpProcess) -> None:
    s3, sm, rt = up.client("s3"), up.sm(), up.rt()
    s3.put_object(Bucket=BUCKET, Key="ll/train/part-0", Body=rp.write(*_data(200, 1)))
    s3.put_object(Bucket=BUCKET, Key="ll/validation/part-0", Body=rp.write(*_data(60, 2)))
    x, y = _data(60, 3)
    csv = "".join(f"{int(label)}," + ",".join(map(str, row)) + "\n" for label, row in zip(y, x, strict=True))
    s3.put_object(Bucket=BUCKET, Key="ll/test/part-0.csv", Body=csv.encode())
    channels = []
    for ch in ("train", "validation", "test"):
        source = {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": f"s3://{BUCKET}/ll/{ch}"}}
        channels.append(
            {"ChannelName": ch, "DataSource": source} | ({"ContentType": "text/csv"} if ch == "test" else {})
        )
    sm.create_training_job(
        TrainingJobName="ll-1",
        RoleArn=ROLE,
        AlgorithmSpecification={"TrainingImage": IMAGE, "TrainingInputMode": "File"},
        HyperParameters={"predictor_type": "binary_classifier", "feature_dim": "3", "mini_batch_size": "20"},
        InputDataConfig=channels,
        OutputDataConfig={"S3OutputPath": f"s3://{BUCKET}/ll-output"},
        ResourceConfig={"InstanceType": "ml.m4.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10},
        StoppingCondition={"MaxRuntimeInSeconds": 600},
    )
    sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="ll-1", WaiterConfig=FAST)
    d = sm.describe_training_job(TrainingJobName="ll-1")
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    metrics = {m["MetricName"]: m["Value"] for m in d["FinalMetricDataList"]}
    assert metrics["test:binary_classification_accuracy"] > 0.85 and "validation:binary_f_beta" in metrics

    sm.create_model(
        ModelName="ll-1",
        PrimaryContainer={"Image": IMAGE, "ModelDataUrl": d["ModelArtifacts"]["S3ModelArtifacts"]},
        ExecutionRoleArn=ROLE,
    )
    variant = {
        "VariantName": "AllTraffic",
        "ModelName": "ll-1",
        "InitialInstanceCount": 1,
        "InstanceType": "ml.m5.large",
    }
    sm.create_endpoint_config(EndpointConfigName="ll-1", ProductionVariants=[variant])
    sm.create_endpoint(EndpointName="ll-1", EndpointConfigName="ll-1")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ll-1", WaiterConfig=FAST)
    probe = np.array([[2.0, -1.0, 0.0], [-2.0, 1.0, 0.0]], dtype=np.float32)
    out = rt.invoke_endpoint(
        EndpointName="ll-1", Body=rp.write(probe), ContentType=rp.CONTENT_TYPE, Accept=rp.CONTENT_TYPE
    )
    records = []
    for payload in rp.frames(out["Body"].read()):
        record = rp.Record()
        record.ParseFromString(payload)
        records.append(record)
    assert [r.label["predicted_label"].float32_tensor.values[0] for r in records] == [1.0, 0.0]
    assert records[0].label["score"].float32_tensor.values[0] > 0.5 > records[1].label["score"].float32_tensor.values[0]
    body = json.dumps({"instances": [{"features": row} for row in probe.tolist()]})
    answer = rt.invoke_endpoint(EndpointName="ll-1", Body=body, ContentType="application/json")
    predictions = json.loads(answer["Body"].read())["predictions"]
    assert [p["predicted_label"] for p in predictions] == [1, 0] and set(predictions[0]) == {"score", "predicted_label"}
