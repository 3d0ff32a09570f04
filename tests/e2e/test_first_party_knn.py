"""SageMaker's first-party k-NN on a real ``servekit up`` through boto3 (issue 45), as the SDK's ``KNN`` and
``RecordSet`` drive it: RecordIO-protobuf channels with labels, ``test:accuracy`` reported without
MetricDefinitions, the artefact deployed with the ``knn`` image answering RecordIO-protobuf and JSON (verbose
too) with each row's predicted label."""

from __future__ import annotations

import json
from typing import Any

import botocore.exceptions
import numpy as np
import pytest

from servekit.serving.codecs import recordio_protobuf as rp
from servekit.testing import algorithms
from servekit.testing.hosting import UpProcess

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
IMAGE = "382416733822.dkr.ecr.us-east-1.amazonaws.com/knn:1"
CENTERS = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])

up = pytest.fixture(scope="module")(algorithms.up_fixture("knn"))


def _points(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(3), n)
    return (CENTERS[labels] + rng.normal(0, 0.5, size=(3 * n, 2))).astype(np.float32), labels.astype(np.float32)


def _train(sm: Any, name: str, **hps: str) -> None:
    base = {"k": "5", "sample_size": "40", "predictor_type": "classifier", "feature_dim": "2"}
    channels = algorithms.s3_channels("knn", ("train", "test"))
    output = algorithms.s3_uri("knn-output")
    sm.create_training_job(
        **algorithms.training_job_request(name, IMAGE, {**base, **hps}, channels, output, "ml.m5.large")
    )


def test_knn_keeps_a_sample_reports_accuracy_and_serves_predicted_labels(up: UpProcess) -> None:
    s3, sm, rt = up.client("s3"), up.sm(), up.rt()
    s3.put_object(Bucket=algorithms.BUCKET, Key="knn/train/part-0", Body=rp.write(*_points(30, 1)))
    s3.put_object(Bucket=algorithms.BUCKET, Key="knn/test/part-0", Body=rp.write(*_points(5, 2)))
    _train(sm, "knn-bad", index_type="faiss.IVFPQ", index_metric="INNER_PRODUCT")
    _train(sm, "knn-1", index_type="faiss.IVFFlat")
    with pytest.raises(botocore.exceptions.WaiterError):
        algorithms.wait_for_training(sm, "knn-bad")
    reason = sm.describe_training_job(TrainingJobName="knn-bad")["FailureReason"]
    assert reason == "ClientError: index_metric INNER_PRODUCT is not supported with index_type faiss.IVFPQ"
    d = algorithms.wait_for_training(sm, "knn-1")
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    assert {m["MetricName"]: m["Value"] for m in d["FinalMetricDataList"]} == {"test:accuracy": 1.0}

    algorithms.deploy(sm, "knn-1", IMAGE, d["ModelArtifacts"]["S3ModelArtifacts"])
    labels = [r["predicted_label"] for r in algorithms.invoke_records(rt, "knn-1", CENTERS.astype(np.float32))]
    assert labels == [[0.0], [1.0], [2.0]]
    body = json.dumps({"instances": [{"features": [9.5, 0.5]}]})
    answer = rt.invoke_endpoint(
        EndpointName="knn-1", Body=body, ContentType="application/json", Accept="application/json; verbose=true"
    )
    prediction = json.loads(answer["Body"].read())["predictions"][0]
    assert prediction["predicted_label"] == 1.0 and prediction["labels"] == [1.0] * 5
    assert len(prediction["distances"]) == 5 and prediction["distances"] == sorted(prediction["distances"])
