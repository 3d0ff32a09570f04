"""SageMaker's first-party PCA on a real ``servekit up`` through boto3 (issue 45), as the SDK's ``PCA`` and
``RecordSet`` drive it: a RecordIO-protobuf channel, the algorithm's hyperparameters, the artefact deployed with the
``pca`` image answering RecordIO-protobuf (``label["projection"]``) and JSON (``{"projections": [...]}``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from servekit.serving.codecs import recordio_protobuf as rp
from servekit.testing import algorithms
from servekit.testing.hosting import UpProcess

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
IMAGE = "382416733822.dkr.ecr.us-east-1.amazonaws.com/pca:1"

up = pytest.fixture(scope="module")(algorithms.up_fixture("pca"))


def test_pca_trains_on_records_and_serves_projections(up: UpProcess) -> None:
    s3, sm, rt = up.client("s3"), up.sm(), up.rt()
    rng = np.random.default_rng(0)
    rows = (rng.normal(size=(100, 6)) * np.array([10.0, 3.0, 0.1, 0.1, 0.1, 0.1])).astype(np.float32)
    s3.put_object(Bucket=algorithms.BUCKET, Key="pca/train/part-0", Body=rp.write(rows))
    hps = {"feature_dim": "6", "mini_batch_size": "50", "num_components": "2", "algorithm_mode": "randomized"}
    hps |= {"subtract_mean": "True", "extra_components": "5"}
    channels = algorithms.s3_channels("pca", ("train",))
    d = algorithms.train(
        sm, algorithms.training_job_request("pca-1", IMAGE, hps, channels, algorithms.s3_uri("pca-output"))
    )
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")

    algorithms.deploy(sm, "pca-1", IMAGE, d["ModelArtifacts"]["S3ModelArtifacts"])
    mean = rows.mean(0)
    probe = (mean + np.array([[20.0, 0, 0, 0, 0, 0], [0, 6, 0, 0, 0, 0]])).astype(np.float32)
    projections = [r["projection"] for r in algorithms.invoke_records(rt, "pca-1", probe)]
    # two components, the top one (the first axis) last, as AWS orders them
    assert len(projections) == 2 and all(len(p) == 2 for p in projections)
    assert abs(projections[0][1]) == pytest.approx(20, abs=1) and abs(projections[0][0]) < 1
    assert abs(projections[1][0]) == pytest.approx(6, abs=1) and abs(projections[1][1]) < 1
    instances = {"instances": [{"features": [float(v) for v in probe[0]]}]}
    answer = rt.invoke_endpoint(EndpointName="pca-1", Body=json.dumps(instances), ContentType="application/json")
    doc = json.loads(answer["Body"].read())
    assert doc["projections"][0]["projection"] == pytest.approx(projections[0], abs=1e-3)
