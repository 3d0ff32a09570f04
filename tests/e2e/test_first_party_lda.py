"""SageMaker's first-party LDA on a real ``servekit up`` through boto3 (issue 45), as the SDK's ``LDA`` and
``RecordSet`` drive it: RecordIO-protobuf channels of word counts, ``test:pwll`` reported without
MetricDefinitions, the artefact deployed with the ``lda`` image answering RecordIO-protobuf and JSON with each
document's topic mixture."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from servekit.serving.codecs import recordio_protobuf as rp
from servekit.testing.hosting import UpProcess

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
FAST = {"Delay": 1, "MaxAttempts": 180}
BUCKET = "sagemaker-us-east-1-000000000000"
IMAGE = "766337827248.dkr.ecr.us-east-1.amazonaws.com/lda:1"
ROLE = "arn:aws:iam::000000000000:role/SageMakerRole"
WORDS = 12  # three topics of four words each


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    u = UpProcess(tmp_path_factory.mktemp("lda") / "home")
    u.start()
    try:
        yield u
    finally:
        u.stop()


def _corpus(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.zeros((n, WORDS), dtype=np.float32)
    for i, t in enumerate(rng.integers(3, size=n)):
        x[i, 4 * t : 4 * t + 4] = rng.multinomial(40, [0.25] * 4)
    return x


def _job(name: str) -> dict[str, Any]:
    channels = [
        {
            "ChannelName": ch,
            "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": f"s3://{BUCKET}/lda/{ch}"}},
        }
        for ch in ("train", "test")
    ]
    return {
        "TrainingJobName": name,
        "RoleArn": ROLE,
        "AlgorithmSpecification": {"TrainingImage": IMAGE, "TrainingInputMode": "File"},
        "HyperParameters": {"num_topics": "3", "feature_dim": str(WORDS), "mini_batch_size": "60"},
        "InputDataConfig": channels,
        "OutputDataConfig": {"S3OutputPath": f"s3://{BUCKET}/lda-output"},
        "ResourceConfig": {"InstanceType": "ml.c4.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
    }


def test_lda_trains_on_word_counts_reports_pwll_and_serves_topic_mixtures(up: UpProcess) -> None:
    s3, sm, rt = up.client("s3"), up.sm(), up.rt()
    s3.put_object(Bucket=BUCKET, Key="lda/train/part-0", Body=rp.write(_corpus(60, 1)))
    s3.put_object(Bucket=BUCKET, Key="lda/test/part-0", Body=rp.write(_corpus(9, 2)))
    sm.create_training_job(**_job("lda-1"))
    sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="lda-1", WaiterConfig=FAST)
    d = sm.describe_training_job(TrainingJobName="lda-1")
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    metrics = {m["MetricName"]: m["Value"] for m in d["FinalMetricDataList"]}
    assert set(metrics) == {"test:pwll"} and np.log(1 / 4) - 0.2 < metrics["test:pwll"] < 0  # 4 words a topic

    sm.create_model(
        ModelName="lda-1",
        PrimaryContainer={"Image": IMAGE, "ModelDataUrl": d["ModelArtifacts"]["S3ModelArtifacts"]},
        ExecutionRoleArn=ROLE,
    )
    variant = {
        "VariantName": "AllTraffic",
        "ModelName": "lda-1",
        "InitialInstanceCount": 1,
        "InstanceType": "ml.m5.large",
    }
    sm.create_endpoint_config(EndpointConfigName="lda-1", ProductionVariants=[variant])
    sm.create_endpoint(EndpointName="lda-1", EndpointConfigName="lda-1")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="lda-1", WaiterConfig=FAST)
    docs = np.zeros((3, WORDS), dtype=np.float32)
    for t in range(3):
        docs[t, 4 * t : 4 * t + 4] = 10
    out = rt.invoke_endpoint(
        EndpointName="lda-1", Body=rp.write(docs), ContentType=rp.CONTENT_TYPE, Accept=rp.CONTENT_TYPE
    )
    mixtures = []
    for payload in rp.frames(out["Body"].read()):
        record = rp.Record()
        record.ParseFromString(payload)
        mixtures.append(list(record.label["topic_mixture"].float32_tensor.values))
    assert np.allclose(np.sum(mixtures, axis=1), 1, atol=1e-5) and np.min(np.max(mixtures, axis=1)) > 0.8
    assert len({int(np.argmax(m)) for m in mixtures}) == 3  # each block of words its own topic
    sparse = {"keys": [0, 1, 2, 3], "shape": [WORDS], "values": [10, 10, 10, 10]}
    body = json.dumps({"instances": [{"data": {"features": sparse}}]})
    answer = rt.invoke_endpoint(EndpointName="lda-1", Body=body, ContentType="application/json")
    mixture = json.loads(answer["Body"].read())["predictions"][0]["topic_mixture"]
    assert np.allclose(mixture, mixtures[0], atol=1e-5)
