"""SageMaker's first-party LDA on a real ``servekit up`` through boto3 (issue 45), as the SDK's ``LDA`` and
``RecordSet`` drive it: RecordIO-protobuf channels of word counts, ``test:pwll`` reported without
MetricDefinitions, the artefact deployed with the ``lda`` image answering RecordIO-protobuf and JSON with each
document's topic mixture."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from servekit.serving.codecs import recordio_protobuf as rp
from servekit.testing import algorithms
from servekit.testing.hosting import UpProcess

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
IMAGE = "766337827248.dkr.ecr.us-east-1.amazonaws.com/lda:1"
WORDS = 12  # three topics of four words each

up = pytest.fixture(scope="module")(algorithms.up_fixture("lda"))


def _corpus(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.zeros((n, WORDS), dtype=np.float32)
    for i, t in enumerate(rng.integers(3, size=n)):
        x[i, 4 * t : 4 * t + 4] = rng.multinomial(40, [0.25] * 4)
    return x


def _job(name: str) -> dict[str, Any]:
    hps = {"num_topics": "3", "feature_dim": str(WORDS), "mini_batch_size": "60"}
    channels = algorithms.s3_channels("lda", ("train", "test"))
    return algorithms.training_job_request(
        name, IMAGE, hps, channels, algorithms.s3_uri("lda-output"), instance_type="ml.c4.xlarge"
    )


def test_lda_trains_on_word_counts_reports_pwll_and_serves_topic_mixtures(up: UpProcess) -> None:
    s3, sm, rt = up.client("s3"), up.sm(), up.rt()
    s3.put_object(Bucket=algorithms.BUCKET, Key="lda/train/part-0", Body=rp.write(_corpus(60, 1)))
    s3.put_object(Bucket=algorithms.BUCKET, Key="lda/test/part-0", Body=rp.write(_corpus(9, 2)))
    d = algorithms.train(sm, _job("lda-1"))
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    metrics = {m["MetricName"]: m["Value"] for m in d["FinalMetricDataList"]}
    assert set(metrics) == {"test:pwll"} and np.log(1 / 4) - 0.2 < metrics["test:pwll"] < 0  # 4 words a topic

    algorithms.deploy(sm, "lda-1", IMAGE, d["ModelArtifacts"]["S3ModelArtifacts"])
    docs = np.zeros((3, WORDS), dtype=np.float32)
    for t in range(3):
        docs[t, 4 * t : 4 * t + 4] = 10
    mixtures = [r["topic_mixture"] for r in algorithms.invoke_records(rt, "lda-1", docs)]
    assert np.allclose(np.sum(mixtures, axis=1), 1, atol=1e-5) and np.min(np.max(mixtures, axis=1)) > 0.8
    assert len({int(np.argmax(m)) for m in mixtures}) == 3  # each block of words its own topic
    sparse = {"keys": [0, 1, 2, 3], "shape": [WORDS], "values": [10, 10, 10, 10]}
    body = json.dumps({"instances": [{"data": {"features": sparse}}]})
    answer = rt.invoke_endpoint(EndpointName="lda-1", Body=body, ContentType="application/json")
    mixture = json.loads(answer["Body"].read())["predictions"][0]["topic_mixture"]
    assert np.allclose(mixture, mixtures[0], atol=1e-5)
