"""SageMaker's first-party Random Cut Forest on a real ``servekit up`` through boto3 (issue 45), as the SDK's
``RandomCutForest`` and ``RecordSet`` drive it: RecordIO-protobuf channels (a labelled test channel), ``test:f1`` in
``FinalMetricDataList`` without MetricDefinitions, the artefact deployed with the ``randomcutforest`` image answering
RecordIO-protobuf (``label["score"]``) and JSON (``{"scores": [...]}``) with scores that grow with anomalousness."""

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
IMAGE = "382416733822.dkr.ecr.us-east-1.amazonaws.com/randomcutforest:1"
ROLE = "arn:aws:iam::000000000000:role/SageMakerRole"


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    u = UpProcess(tmp_path_factory.mktemp("rcf") / "home")
    u.start()
    try:
        yield u
    finally:
        u.stop()


def test_rcf_trains_reports_f1_and_serves_scores(up: UpProcess) -> None:
    s3, sm, rt = up.client("s3"), up.sm(), up.rt()
    rng = np.random.default_rng(0)
    s3.put_object(Bucket=BUCKET, Key="rcf/train/part-0", Body=rp.write(rng.random((500, 4)).astype(np.float32)))
    test = np.vstack([rng.random((95, 4)), rng.random((5, 4)) + 4]).astype(np.float32)
    s3.put_object(Bucket=BUCKET, Key="rcf/test/part-0", Body=rp.write(test, np.r_[np.zeros(95), np.ones(5)]))
    channels = [
        {
            "ChannelName": ch,
            "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": f"s3://{BUCKET}/rcf/{ch}"}},
        }
        for ch in ("train", "test")
    ]
    sm.create_training_job(
        TrainingJobName="rcf-1",
        RoleArn=ROLE,
        AlgorithmSpecification={"TrainingImage": IMAGE, "TrainingInputMode": "File"},
        HyperParameters={
            "feature_dim": "4",
            "num_trees": "50",
            "num_samples_per_tree": "64",
            "mini_batch_size": "1000",
            "eval_metrics": '["accuracy", "precision_recall_fscore"]',
        },
        InputDataConfig=channels,
        OutputDataConfig={"S3OutputPath": f"s3://{BUCKET}/rcf-output"},
        ResourceConfig={"InstanceType": "ml.m4.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10},
        StoppingCondition={"MaxRuntimeInSeconds": 600},
    )
    sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="rcf-1", WaiterConfig=FAST)
    d = sm.describe_training_job(TrainingJobName="rcf-1")
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    metrics = {m["MetricName"]: m["Value"] for m in d["FinalMetricDataList"]}
    assert set(metrics) == {"test:accuracy", "test:precision", "test:recall", "test:f1"}
    # the five far points all found; a corner of the unit cube may pass three sigma too
    assert metrics["test:recall"] == 1.0 and metrics["test:f1"] > 0.8 and metrics["test:accuracy"] >= 0.97

    sm.create_model(
        ModelName="rcf-1",
        PrimaryContainer={"Image": IMAGE, "ModelDataUrl": d["ModelArtifacts"]["S3ModelArtifacts"]},
        ExecutionRoleArn=ROLE,
    )
    variant = {
        "VariantName": "AllTraffic",
        "ModelName": "rcf-1",
        "InitialInstanceCount": 1,
        "InstanceType": "ml.m5.large",
    }
    sm.create_endpoint_config(EndpointConfigName="rcf-1", ProductionVariants=[variant])
    sm.create_endpoint(EndpointName="rcf-1", EndpointConfigName="rcf-1")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="rcf-1", WaiterConfig=FAST)
    probe = np.array([[0.5, 0.5, 0.5, 0.5], [2, 2, 2, 2], [30, 30, 30, 30]], dtype=np.float32)
    out = rt.invoke_endpoint(
        EndpointName="rcf-1", Body=rp.write(probe), ContentType=rp.CONTENT_TYPE, Accept=rp.CONTENT_TYPE
    )
    scores = []
    for payload in rp.frames(out["Body"].read()):
        record = rp.Record()
        record.ParseFromString(payload)
        assert len(record.label["score"].float32_tensor.values) == 1
        scores.append(record.label["score"].float32_tensor.values[0])
    assert len(scores) == 3 and 0 < scores[0] < scores[1] < scores[2]
    instances = {"instances": [{"features": [float(v) for v in probe[2]]}]}
    answer = rt.invoke_endpoint(EndpointName="rcf-1", Body=json.dumps(instances), ContentType="application/json")
    assert json.loads(answer["Body"].read()) == {"scores": [{"score": pytest.approx(scores[2], rel=1e-5)}]}
