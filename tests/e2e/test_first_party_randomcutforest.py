"""SageMaker's first-party Random Cut Forest on a real ``servekit up`` through boto3 (issue 45), as the SDK's
``RandomCutForest`` and ``RecordSet`` drive it: RecordIO-protobuf channels (a labelled test channel), ``test:f1`` in
``FinalMetricDataList`` without MetricDefinitions, the artefact deployed with the ``randomcutforest`` image answering
RecordIO-protobuf (``label["score"]``) and JSON (``{"scores": [...]}``) with scores that grow with anomalousness."""

from __future__ import annotations

import json

import numpy as np
import pytest

from servekit.serving.codecs import recordio_protobuf as rp
from servekit.testing import algorithms
from servekit.testing.hosting import UpProcess

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
IMAGE = "382416733822.dkr.ecr.us-east-1.amazonaws.com/randomcutforest:1"

up = pytest.fixture(scope="module")(algorithms.up_fixture("rcf"))


def test_rcf_trains_reports_f1_and_serves_scores(up: UpProcess) -> None:
    s3, sm, rt = up.client("s3"), up.sm(), up.rt()
    rng = np.random.default_rng(0)
    s3.put_object(
        Bucket=algorithms.BUCKET,
        Key="rcf/train/part-0",
        Body=rp.write(rng.random((500, 4)).astype(np.float32)),
    )
    test = np.vstack([rng.random((95, 4)), rng.random((5, 4)) + 4]).astype(np.float32)
    s3.put_object(Bucket=algorithms.BUCKET, Key="rcf/test/part-0", Body=rp.write(test, np.r_[np.zeros(95), np.ones(5)]))
    channels = algorithms.s3_channels("rcf", ("train", "test"))
    hps = {"feature_dim": "4", "num_trees": "50", "num_samples_per_tree": "64", "mini_batch_size": "1000"}
    hps["eval_metrics"] = '["accuracy", "precision_recall_fscore"]'
    d = algorithms.train(
        sm, algorithms.training_job_request("rcf-1", IMAGE, hps, channels, algorithms.s3_uri("rcf-output"))
    )
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    metrics = {m["MetricName"]: m["Value"] for m in d["FinalMetricDataList"]}
    assert set(metrics) == {"test:accuracy", "test:precision", "test:recall", "test:f1"}
    # the five far points all found; a corner of the unit cube may pass three sigma too
    assert metrics["test:recall"] == 1.0 and metrics["test:f1"] > 0.8 and metrics["test:accuracy"] >= 0.97

    algorithms.deploy(sm, "rcf-1", IMAGE, d["ModelArtifacts"]["S3ModelArtifacts"])
    probe = np.array([[0.5, 0.5, 0.5, 0.5], [2, 2, 2, 2], [30, 30, 30, 30]], dtype=np.float32)
    scores = []
    for record in algorithms.invoke_records(rt, "rcf-1", probe):
        assert len(record["score"]) == 1
        scores.append(record["score"][0])
    assert len(scores) == 3 and 0 < scores[0] < scores[1] < scores[2]
    instances = {"instances": [{"features": [float(v) for v in probe[2]]}]}
    answer = rt.invoke_endpoint(EndpointName="rcf-1", Body=json.dumps(instances), ContentType="application/json")
    assert json.loads(answer["Body"].read()) == {"scores": [{"score": pytest.approx(scores[2], rel=1e-5)}]}
