"""SageMaker's first-party k-means on a real ``servekit up`` through boto3 (issue 45), as the SDK's ``KMeans`` and
``RecordSet`` drive it: RecordIO-protobuf channels, the algorithm's hyperparameters checked, ``test:msd`` reported
without MetricDefinitions (and taken as a tuning job's objective), the artefact deployed with the ``kmeans`` image
answering RecordIO-protobuf, CSV and JSON with each record's closest cluster."""

from __future__ import annotations

import json
from typing import Any

import botocore.exceptions
import numpy as np
import pytest
from tests.e2e.test_tuning_jobs import wait

from servekit.serving.codecs import recordio_protobuf as rp
from servekit.testing import algorithms
from servekit.testing.hosting import UpProcess

pytestmark = pytest.mark.e2e
IMAGE = "382416733822.dkr.ecr.us-east-1.amazonaws.com/kmeans:1"
CENTERS = np.array([[0.0, 0.0], [10.0, 10.0], [0.0, 10.0]])

up = pytest.fixture(scope="module")(algorithms.up_fixture("algorithms"))


def _points(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.vstack([c + rng.normal(0, 0.3, size=(n, 2)) for c in CENTERS]).astype(np.float32)


def _job(name: str, **hps: str) -> dict[str, Any]:
    return algorithms.training_job_request(
        name,
        IMAGE,
        {"k": "3", "feature_dim": "2", "mini_batch_size": "50", "force_dense": "True", **hps},
        algorithms.s3_channels("kmeans", ("train", "test")),
        algorithms.s3_uri("kmeans-output"),
    )


def test_kmeans_trains_on_records_reports_msd_and_serves_its_clusters(up: UpProcess) -> None:
    s3, sm, rt = up.client("s3"), up.sm(), up.rt()
    s3.put_object(Bucket=algorithms.BUCKET, Key="kmeans/train/part-0", Body=rp.write(_points(50, 1)))
    s3.put_object(Bucket=algorithms.BUCKET, Key="kmeans/test/part-0", Body=rp.write(_points(10, 2)))
    tags = [{"Key": "sagemaker.amazonaws.com/job", "Value": "kmeans"}, {"Key": "team", "Value": "a"}]
    d = algorithms.train(sm, _job("kmeans-1", init_method="kmeans++", eval_metrics='["msd", "ssd"]'), Tags=tags)
    # the job's tags, as KMeans.attach() reads them; AddTags and DeleteTags change them
    assert sm.list_tags(ResourceArn=d["TrainingJobArn"])["Tags"] == tags
    sm.add_tags(ResourceArn=d["TrainingJobArn"], Tags=[{"Key": "team", "Value": "b"}])
    sm.delete_tags(ResourceArn=d["TrainingJobArn"], TagKeys=["sagemaker.amazonaws.com/job"])
    assert sm.list_tags(ResourceArn=d["TrainingJobArn"])["Tags"] == [{"Key": "team", "Value": "b"}]
    with pytest.raises(botocore.exceptions.ClientError, match="does not exist"):
        sm.list_tags(ResourceArn=d["TrainingJobArn"].replace("kmeans-1", "no-such-job"))
    # Search finds the job by its artefact, as the SDK's model card code does (Estimator.register())
    artefact = d["ModelArtifacts"]["S3ModelArtifacts"]
    by_artefact = {"Name": "ModelArtifacts.S3ModelArtifacts", "Operator": "Equals", "Value": artefact}
    found = sm.search(Resource="TrainingJob", SearchExpression={"Filters": [by_artefact]})["Results"]
    assert [r["TrainingJob"]["TrainingJobName"] for r in found] == ["kmeans-1"]
    assert found[0]["TrainingJob"]["Tags"] == [{"Key": "team", "Value": "b"}]
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    metrics = {m["MetricName"]: m["Value"] for m in d["FinalMetricDataList"]}
    assert set(metrics) == {"test:msd", "test:ssd"} and metrics["test:msd"] < 0.5  # points 0.3 from their centers

    algorithms.create_model(
        sm, "kmeans-1", IMAGE, d["ModelArtifacts"]["S3ModelArtifacts"], Tags=[{"Key": "model", "Value": "kmeans"}]
    )
    model_arn = sm.describe_model(ModelName="kmeans-1")["ModelArn"]
    assert sm.list_tags(ResourceArn=model_arn)["Tags"] == [{"Key": "model", "Value": "kmeans"}]
    algorithms.create_endpoint(sm, "kmeans-1")
    probe = np.array([[0.1, -0.1], [9.9, 10.2], [0.2, 9.8]], dtype=np.float32)
    records = algorithms.invoke_records(rt, "kmeans-1", probe)
    clusters = [int(r["closest_cluster"][0]) for r in records]
    assert len(set(clusters)) == 3  # three points, three different clusters
    assert all(r["distance_to_cluster"][0] < 1.0 for r in records)
    csv = rt.invoke_endpoint(EndpointName="kmeans-1", Body=b"0.1,-0.1\n9.9,10.2\n", ContentType="text/csv")
    predictions = json.loads(csv["Body"].read())["predictions"]
    assert [int(p["closest_cluster"]) for p in predictions] == clusters[:2]
    # a batch transform of the same model: CSV rows in, a line per row out
    s3.put_object(Bucket=algorithms.BUCKET, Key="kmeans/batch/rows.csv", Body=b"0.1,-0.1\n9.9,10.2\n0.2,9.8\n")
    sm.create_transform_job(
        TransformJobName="kmeans-batch",
        ModelName="kmeans-1",
        TransformInput={
            "DataSource": {
                "S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": f"s3://{algorithms.BUCKET}/kmeans/batch"}
            },
            "ContentType": "text/csv",
            "SplitType": "Line",
        },
        TransformOutput={"S3OutputPath": f"s3://{algorithms.BUCKET}/kmeans/batch-out", "AssembleWith": "Line"},
        TransformResources={"InstanceType": "ml.m5.large", "InstanceCount": 1},
    )
    sm.get_waiter("transform_job_completed_or_stopped").wait(
        TransformJobName="kmeans-batch", WaiterConfig=algorithms.FAST
    )
    t = sm.describe_transform_job(TransformJobName="kmeans-batch")
    assert t["TransformJobStatus"] == "Completed", t.get("FailureReason")
    lines = s3.get_object(Bucket=algorithms.BUCKET, Key="kmeans/batch-out/rows.csv.out")["Body"].read().decode().split()
    assert [int(line.split(",")[0]) for line in lines] == clusters
    instances = {"instances": [{"features": [0.2, 9.8]}]}
    answer = rt.invoke_endpoint(EndpointName="kmeans-1", Body=json.dumps(instances), ContentType="application/json")
    assert int(json.loads(answer["Body"].read())["predictions"][0]["closest_cluster"]) == clusters[2]


def test_bad_hyperparameters_fail_the_job_naming_them(up: UpProcess) -> None:
    sm = up.sm()
    sm.create_training_job(**_job("kmeans-bad", init_method="best"))
    with pytest.raises(botocore.exceptions.WaiterError):
        algorithms.wait_for_training(sm, "kmeans-bad")
    reason = sm.describe_training_job(TrainingJobName="kmeans-bad")["FailureReason"]
    assert reason == "ClientError: Hyperparameter init_method: 'best' is not valid (expected one of random, kmeans++)"
    job = _job("kmeans-extra", colour="blue")
    sm.create_training_job(**job)
    with pytest.raises(botocore.exceptions.WaiterError):
        algorithms.wait_for_training(sm, "kmeans-extra")
    assert "colour was unexpected" in sm.describe_training_job(TrainingJobName="kmeans-extra")["FailureReason"]


def test_a_tuning_job_takes_test_msd_as_its_objective(up: UpProcess) -> None:
    sm = up.sm()
    definition = {k: v for k, v in _job("unused").items() if k not in ("TrainingJobName",)}
    definition["StaticHyperParameters"] = definition.pop("HyperParameters")
    del definition["StaticHyperParameters"]["k"]
    sm.create_hyper_parameter_tuning_job(
        HyperParameterTuningJobName="kmeans-tune",
        HyperParameterTuningJobConfig={
            "Strategy": "Random",
            "HyperParameterTuningJobObjective": {"Type": "Minimize", "MetricName": "test:msd"},
            "ResourceLimits": {"MaxNumberOfTrainingJobs": 2, "MaxParallelTrainingJobs": 1},
            "ParameterRanges": {"IntegerParameterRanges": [{"Name": "k", "MinValue": "2", "MaxValue": "4"}]},
        },
        TrainingJobDefinition=definition,
    )
    d = wait(sm, "kmeans-tune")
    assert d["HyperParameterTuningJobStatus"] == "Completed", d.get("FailureReason")
    best = d["BestTrainingJob"]["FinalHyperParameterTuningJobObjectiveMetric"]
    assert best["MetricName"] == "test:msd" and best["Value"] >= 0
