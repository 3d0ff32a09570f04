"""SageMaker's first-party Linear Learner on a real ``servekit up`` through boto3 (issue 45), as the SDK's
``LinearLearner`` and ``RecordSet`` drive it: RecordIO-protobuf train and validation channels with labels and a CSV
test channel (label first), ``test:*`` and ``validation:*`` metrics without MetricDefinitions, the artefact deployed
with the ``linear-learner`` image answering RecordIO-protobuf (``label["score"]``, ``label["predicted_label"]``) and
JSON (``{"predictions": [{"score": ..., "predicted_label": ...}]}``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from servekit.serving.codecs import recordio_protobuf as rp
from servekit.testing import algorithms
from servekit.testing.hosting import UpProcess

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
IMAGE = "382416733822.dkr.ecr.us-east-1.amazonaws.com/linear-learner:1"

up = pytest.fixture(scope="module")(algorithms.up_fixture("linear-learner"))


def _data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3)).astype(np.float32)
    return x, (x @ np.array([2.0, -1.0, 0.5]) > 0).astype(np.float32)


def test_linear_learner_trains_on_records_reports_its_metrics_and_serves_scores(up: UpProcess) -> None:
    s3, sm, rt = up.client("s3"), up.sm(), up.rt()
    s3.put_object(Bucket=algorithms.BUCKET, Key="ll/train/part-0", Body=rp.write(*_data(200, 1)))
    s3.put_object(Bucket=algorithms.BUCKET, Key="ll/validation/part-0", Body=rp.write(*_data(60, 2)))
    x, y = _data(60, 3)
    csv = "".join(f"{int(label)}," + ",".join(map(str, row)) + "\n" for label, row in zip(y, x, strict=True))
    s3.put_object(Bucket=algorithms.BUCKET, Key="ll/test/part-0.csv", Body=csv.encode())
    channels = algorithms.s3_channels("ll", ("train", "validation", "test"), content_types={"test": "text/csv"})
    hps = {"predictor_type": "binary_classifier", "feature_dim": "3", "mini_batch_size": "20"}
    d = algorithms.train(
        sm, algorithms.training_job_request("ll-1", IMAGE, hps, channels, algorithms.s3_uri("ll-output"))
    )
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    metrics = {m["MetricName"]: m["Value"] for m in d["FinalMetricDataList"]}
    assert metrics["test:binary_classification_accuracy"] > 0.85 and "validation:binary_f_beta" in metrics

    algorithms.deploy(sm, "ll-1", IMAGE, d["ModelArtifacts"]["S3ModelArtifacts"])
    probe = np.array([[2.0, -1.0, 0.0], [-2.0, 1.0, 0.0]], dtype=np.float32)
    records = algorithms.invoke_records(rt, "ll-1", probe)
    assert [r["predicted_label"][0] for r in records] == [1.0, 0.0]
    assert records[0]["score"][0] > 0.5 > records[1]["score"][0]
    body = json.dumps({"instances": [{"features": row} for row in probe.tolist()]})
    answer = rt.invoke_endpoint(EndpointName="ll-1", Body=body, ContentType="application/json")
    predictions = json.loads(answer["Body"].read())["predictions"]
    assert [p["predicted_label"] for p in predictions] == [1, 0] and set(predictions[0]) == {"score", "predicted_label"}
