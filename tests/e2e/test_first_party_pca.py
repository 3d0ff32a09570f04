"""SageMaker's first-party PCA on a real ``servekit up`` through boto3 (issue 45), as the SDK's ``PCA`` and
``RecordSet`` drive it: a RecordIO-protobuf channel, the algorithm's hyperparameters, the artefact deployed with the
``pca`` image answering RecordIO-protobuf (``label["projection"]``) and JSON (``{"projections": [...]}``)."""

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
IMAGE = "382416733822.dkr.ecr.us-east-1.amazonaws.com/pca:1"
ROLE = "arn:aws:iam::000000000000:role/SageMakerRole"


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    u = UpProcess(tmp_path_factory.mktemp("pca") / "home")
    u.start()
    try:
        yield u
    finally:
        u.stop()


def test_pca_trains_on_records_and_serves_projections(up: UpProcess) -> None:
    s3, sm, rt = up.client("s3"), up.sm(), up.rt()
    rng = np.random.default_rng(0)
    rows = (rng.normal(size=(100, 6)) * np.array([10.0, 3.0, 0.1, 0.1, 0.1, 0.1])).astype(np.float32)
    s3.put_object(Bucket=BUCKET, Key="pca/train/part-0", Body=rp.write(rows))
    sm.create_training_job(
        TrainingJobName="pca-1",
        RoleArn=ROLE,
        AlgorithmSpecification={"TrainingImage": IMAGE, "TrainingInputMode": "File"},
        HyperParameters={
            "feature_dim": "6",
            "mini_batch_size": "50",
            "num_components": "2",
            "algorithm_mode": "randomized",
            "subtract_mean": "True",
            "extra_components": "5",
        },
        InputDataConfig=[
            {
                "ChannelName": "train",
                "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": f"s3://{BUCKET}/pca/train"}},
            }
        ],
        OutputDataConfig={"S3OutputPath": f"s3://{BUCKET}/pca-output"},
        ResourceConfig={"InstanceType": "ml.m4.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10},
        StoppingCondition={"MaxRuntimeInSeconds": 600},
    )
    sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="pca-1", WaiterConfig=FAST)
    d = sm.describe_training_job(TrainingJobName="pca-1")
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")

    sm.create_model(
        ModelName="pca-1",
        PrimaryContainer={"Image": IMAGE, "ModelDataUrl": d["ModelArtifacts"]["S3ModelArtifacts"]},
        ExecutionRoleArn=ROLE,
    )
    variant = {
        "VariantName": "AllTraffic",
        "ModelName": "pca-1",
        "InitialInstanceCount": 1,
        "InstanceType": "ml.m5.large",
    }
    sm.create_endpoint_config(EndpointConfigName="pca-1", ProductionVariants=[variant])
    sm.create_endpoint(EndpointName="pca-1", EndpointConfigName="pca-1")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="pca-1", WaiterConfig=FAST)
    mean = rows.mean(0)
    probe = (mean + np.array([[20.0, 0, 0, 0, 0, 0], [0, 6, 0, 0, 0, 0]])).astype(np.float32)
    out = rt.invoke_endpoint(
        EndpointName="pca-1", Body=rp.write(probe), ContentType=rp.CONTENT_TYPE, Accept=rp.CONTENT_TYPE
    )
    projections = []
    for payload in rp.frames(out["Body"].read()):
        record = rp.Record()
        record.ParseFromString(payload)
        projections.append(list(record.label["projection"].float32_tensor.values))
    # two components, the top one (the first axis) last, as AWS orders them
    assert len(projections) == 2 and all(len(p) == 2 for p in projections)
    assert abs(projections[0][1]) == pytest.approx(20, abs=1) and abs(projections[0][0]) < 1
    assert abs(projections[1][0]) == pytest.approx(6, abs=1) and abs(projections[1][1]) < 1
    instances = {"instances": [{"features": [float(v) for v in probe[0]]}]}
    answer = rt.invoke_endpoint(EndpointName="pca-1", Body=json.dumps(instances), ContentType="application/json")
    doc = json.loads(answer["Body"].read())
    assert doc["projections"][0]["projection"] == pytest.approx(projections[0], abs=1e-3)
