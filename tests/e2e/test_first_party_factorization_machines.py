"""SageMaker's first-party Factorization Machines on a real ``servekit up`` through boto3 (issue 45), as the SDK's
``FactorizationMachines`` (and test_byo_estimator.py's ``Estimator``) drive it: a RecordIO-protobuf train and test
channel with labels, ``test:binary_classification_accuracy`` without MetricDefinitions, the artefact deployed with
the ``factorization-machines`` image answering the SDK tests' JSON (``{"instances": [{"features": [...]}]}`` in,
``{"predictions": [{"score": ..., "predicted_label": ...}]}`` out) and RecordIO-protobuf."""

from __future__ import annotations

import json

import numpy as np
import pytest

from servekit.serving.codecs import recordio_protobuf as rp
from servekit.testing import algorithms
from servekit.testing.hosting import UpProcess

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
IMAGE = "382416733822.dkr.ecr.us-east-1.amazonaws.com/factorization-machines:1"

up = pytest.fixture(scope="module")(algorithms.up_fixture("factorization-machines"))


def _data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Labels from a pairwise interaction (features 0 and 1 both on) or feature 2."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 2, size=(n, 4)).astype(np.float32)
    return x, ((x[:, 0] * x[:, 1] + x[:, 2]) > 0.5).astype(np.float32)


def test_factorization_machines_train_report_accuracy_and_serve_json(up: UpProcess) -> None:
    s3, sm, rt = up.client("s3"), up.sm(), up.rt()
    s3.put_object(Bucket=algorithms.BUCKET, Key="fm/train/part-0", Body=rp.write(*_data(300, 1)))
    s3.put_object(Bucket=algorithms.BUCKET, Key="fm/test/part-0", Body=rp.write(*_data(60, 2)))
    channels = algorithms.s3_channels("fm", ("train", "test"))
    hps = {"num_factors": "4", "feature_dim": "4", "predictor_type": "binary_classifier", "mini_batch_size": "30"}
    hps |= {"epochs": "40", "linear_lr": "0.05", "factors_lr": "0.05", "factors_init_sigma": "0.1"}
    d = algorithms.train(
        sm, algorithms.training_job_request("fm-1", IMAGE, hps, channels, algorithms.s3_uri("fm-output"))
    )
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    metrics = {m["MetricName"]: m["Value"] for m in d["FinalMetricDataList"]}
    assert set(metrics) == {
        "test:binary_classification_accuracy",
        "test:binary_classification_cross_entropy",
        "test:binary_f_beta",
    }
    assert metrics["test:binary_classification_accuracy"] > 0.9

    algorithms.deploy(sm, "fm-1", IMAGE, d["ModelArtifacts"]["S3ModelArtifacts"])
    probe = [[1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 1.0]]  # the interaction on, then off
    body = json.dumps({"instances": [{"features": row} for row in probe]})  # the SDK tests' serializer
    answer = rt.invoke_endpoint(
        EndpointName="fm-1", Body=body, ContentType="application/json", Accept="application/json"
    )
    predictions = json.loads(answer["Body"].read())["predictions"]
    assert [p["predicted_label"] for p in predictions] == [1, 0]
    record = algorithms.invoke_records(rt, "fm-1", np.array(probe, dtype=np.float32))[0]
    assert record["score"][0] == pytest.approx(predictions[0]["score"], rel=1e-5)
