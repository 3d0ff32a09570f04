"""Hyperparameter tuning jobs on a real ``servekit up`` through boto3: a search launches training jobs (at most
MaxParallelTrainingJobs at once, MaxNumberOfTrainingJobs in all), reads each objective from the job's metrics, and
names the best; Stop stops the search and its running jobs."""

from __future__ import annotations

import io
import json
import tarfile
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from servekit.aws import Credentials
from servekit.testing.hosting import UpProcess

pytestmark = pytest.mark.e2e
IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"
BUCKET = "sagemaker-us-east-1-000000000000"
# the objective peaks at alpha = 0.3: the best job is the one whose alpha came closest
SCRIPT = """
import argparse, time
p = argparse.ArgumentParser()
p.add_argument("--alpha", type=float)
p.add_argument("--depth", type=int)
p.add_argument("--kind", type=str)
p.add_argument("--sleep", type=float, default=0)
a = p.parse_args()
time.sleep(a.sleep)
print(f"score={1 - (a.alpha - 0.3) ** 2 - 0.01 * a.depth:.6f} kind={a.kind}")
"""


def tar_gz(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    u = UpProcess(tmp_path_factory.mktemp("tuning") / "home")
    u.start()
    try:
        yield u
    finally:
        u.stop()


def clients(up: UpProcess) -> tuple[Any, Any]:
    key = Credentials.load_or_create(up.home).admin
    kw = {
        "endpoint_url": up.url,
        "region_name": "us-east-1",
        "aws_access_key_id": key.access_key_id,
        "aws_secret_access_key": key.secret_access_key,
    }
    session = boto3.session.Session()
    return session.client("sagemaker", **kw), session.client("s3", **kw)


def tuning(s3: Any, name: str, strategy: str, jobs: int, parallel: int, sleep: float = 0) -> dict[str, Any]:
    s3.put_object(Bucket=BUCKET, Key=f"{name}/source/sourcedir.tar.gz", Body=tar_gz({"train.py": SCRIPT}))
    s3.put_object(Bucket=BUCKET, Key=f"{name}/data/x.csv", Body=b"1\n")
    return {
        "HyperParameterTuningJobName": name,
        "HyperParameterTuningJobConfig": {
            "Strategy": strategy,
            "HyperParameterTuningJobObjective": {"Type": "Maximize", "MetricName": "score"},
            "ResourceLimits": {"MaxNumberOfTrainingJobs": jobs, "MaxParallelTrainingJobs": parallel},
            "ParameterRanges": {
                "ContinuousParameterRanges": [{"Name": "alpha", "MinValue": "0", "MaxValue": "1"}],
                "IntegerParameterRanges": [{"Name": "depth", "MinValue": "1", "MaxValue": "3"}],
                "CategoricalParameterRanges": [{"Name": "kind", "Values": ['"a"', '"b"']}],
            },
        },
        "TrainingJobDefinition": {
            "StaticHyperParameters": {
                "sleep": json.dumps(sleep),
                "sagemaker_program": json.dumps("train.py"),
                "sagemaker_submit_directory": json.dumps(f"s3://{BUCKET}/{name}/source/sourcedir.tar.gz"),
            },
            "AlgorithmSpecification": {
                "TrainingImage": IMAGE,
                "TrainingInputMode": "File",
                "MetricDefinitions": [{"Name": "score", "Regex": "score=([-0-9.]+)"}],
            },
            "RoleArn": "arn:aws:iam::000000000000:role/tuner",
            "InputDataConfig": [
                {
                    "ChannelName": "train",
                    "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": f"s3://{BUCKET}/{name}/data"}},
                }
            ],
            "OutputDataConfig": {"S3OutputPath": f"s3://{BUCKET}/{name}/output"},
            "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 10},
            "StoppingCondition": {"MaxRuntimeInSeconds": 600},
        },
    }


def wait(sm: Any, name: str, timeout_s: float = 300) -> dict[str, Any]:
    """Poll the tuning job until it ends, as the SDK's wait() does (botocore has no waiter for it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        d = dict(sm.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName=name))
        if d["HyperParameterTuningJobStatus"] in ("Completed", "Failed", "Stopped"):
            return d
        time.sleep(0.5)  # another process's progress
    raise AssertionError(f"{name} still {d['HyperParameterTuningJobStatus']} after {timeout_s}s")


@pytest.mark.parametrize("strategy", ["Random", "Bayesian"])
def test_a_search_runs_its_jobs_and_names_the_best(up: UpProcess, strategy: str) -> None:
    sm, s3 = clients(up)
    name = f"tune-{strategy.lower()}"
    sm.create_hyper_parameter_tuning_job(**tuning(s3, name, strategy, jobs=5, parallel=2))
    d = wait(sm, name)
    assert d["HyperParameterTuningJobStatus"] == "Completed"
    assert d["TrainingJobStatusCounters"]["Completed"] == 5
    assert d["ObjectiveStatusCounters"]["Succeeded"] == 5
    jobs = sm.list_training_jobs_for_hyper_parameter_tuning_job(HyperParameterTuningJobName=name, MaxResults=100)
    summaries = jobs["TrainingJobSummaries"]
    assert len(summaries) == 5
    scores = {s["TrainingJobName"]: s["FinalHyperParameterTuningJobObjectiveMetric"]["Value"] for s in summaries}
    best = d["BestTrainingJob"]
    assert best["FinalHyperParameterTuningJobObjectiveMetric"]["Value"] == max(scores.values())
    assert scores[best["TrainingJobName"]] == max(scores.values())
    tuned = best["TunedHyperParameters"]
    assert set(tuned) == {"alpha", "depth", "kind"} and tuned["kind"] in ('"a"', '"b"')
    expected = 1 - (float(tuned["alpha"]) - 0.3) ** 2 - 0.01 * int(tuned["depth"])
    assert best["FinalHyperParameterTuningJobObjectiveMetric"]["Value"] == pytest.approx(expected, abs=1e-5)
    trained = sm.describe_training_job(TrainingJobName=best["TrainingJobName"])
    assert trained["TuningJobArn"] == d["HyperParameterTuningJobArn"]
    assert trained["HyperParameters"]["alpha"] == tuned["alpha"]
    # never more than MaxParallelTrainingJobs at once: no three training runs overlap in time
    spans = sorted((j["TrainingStartTime"], j["TrainingEndTime"]) for j in summaries if "TrainingStartTime" in j)
    for i in range(len(spans) - 2):
        assert not (spans[i + 2][0] < spans[i][1] and spans[i + 2][0] < spans[i + 1][1])


def test_grid_covers_the_space_and_stop_stops_the_search(up: UpProcess) -> None:
    sm, s3 = clients(up)
    grid = tuning(s3, "tune-grid", "Grid", jobs=100, parallel=2)
    grid["HyperParameterTuningJobConfig"]["ParameterRanges"].pop("ContinuousParameterRanges")
    grid["TrainingJobDefinition"]["StaticHyperParameters"]["alpha"] = "0.3"
    sm.create_hyper_parameter_tuning_job(**grid)
    d = wait(sm, "tune-grid")
    assert d["TrainingJobStatusCounters"]["Completed"] == 6  # depth 1..3 x kind a, b: each once
    assert d["BestTrainingJob"]["TunedHyperParameters"]["depth"] == "1"
    sm.create_hyper_parameter_tuning_job(**tuning(s3, "tune-stop", "Random", jobs=10, parallel=2, sleep=30))
    sm.stop_hyper_parameter_tuning_job(HyperParameterTuningJobName="tune-stop")
    d = wait(sm, "tune-stop")
    assert d["HyperParameterTuningJobStatus"] == "Stopped"
    assert d["TrainingJobStatusCounters"]["Completed"] == 0


# ---- jobs that print their objective once per epoch: early stopping, Hyperband ------------------------------------
# a flat learning curve (the same score every epoch, peaking at alpha = 0.3), `pace` seconds an epoch
EPOCHS_SCRIPT = """
import argparse, time
p = argparse.ArgumentParser()
p.add_argument("--alpha", type=float)
p.add_argument("--epochs", type=int)
p.add_argument("--pace", type=float)
a = p.parse_args()
for epoch in range(1, a.epochs + 1):
    print(f"epoch={epoch} score={1 - (a.alpha - 0.3) ** 2:.6f}")
    time.sleep(a.pace)
"""


def per_epoch(s3: Any, name: str, strategy: str, jobs: int, epochs: int, pace: float) -> dict[str, Any]:
    """A tuning job over alpha whose training jobs print ``epoch=N score=S`` ``epochs`` times, one at a time."""
    p = tuning(s3, name, strategy, jobs=jobs, parallel=1)
    s3.put_object(Bucket=BUCKET, Key=f"{name}/source/sourcedir.tar.gz", Body=tar_gz({"train.py": EPOCHS_SCRIPT}))
    config, definition = p["HyperParameterTuningJobConfig"], p["TrainingJobDefinition"]
    config["ParameterRanges"] = {"ContinuousParameterRanges": [{"Name": "alpha", "MinValue": "0", "MaxValue": "1"}]}
    static = definition["StaticHyperParameters"]
    del static["sleep"]
    static.update(epochs=str(epochs), pace=json.dumps(pace))
    definition["AlgorithmSpecification"]["MetricDefinitions"] = [
        {"Name": "score", "Regex": "score=([-0-9.]+)"},
        {"Name": "epoch", "Regex": "epoch=([0-9]+)"},
    ]
    return p


def jobs_of(sm: Any, name: str) -> list[dict[str, Any]]:
    """The tuning job's training jobs in launch order, each as DescribeTrainingJob answers it."""
    summaries = sm.list_training_jobs_for_hyper_parameter_tuning_job(
        HyperParameterTuningJobName=name, MaxResults=100, SortOrder="Ascending"
    )["TrainingJobSummaries"]
    return [
        dict(sm.describe_training_job(TrainingJobName=s["TrainingJobName"]))
        for s in sorted(summaries, key=lambda s: s["CreationTime"])
    ]


def final(job: dict[str, Any], metric: str) -> float:
    return float(next(m["Value"] for m in job["FinalMetricDataList"] if m["MetricName"] == metric))


def test_early_stopping_stops_a_job_worse_than_the_median_of_the_earlier_ones(up: UpProcess) -> None:
    sm, s3 = clients(up)
    p = per_epoch(s3, "tune-auto", "Grid", jobs=5, epochs=10, pace=0.2)
    config = p["HyperParameterTuningJobConfig"]
    config["TrainingJobEarlyStoppingType"] = "Auto"
    # Grid runs these in order (scores 0.64, 0.91, 0.51, 1, 0.75): each job is either the best so far, which no
    # median stops, or worse than the median of the jobs before it at its first epoch
    config["ParameterRanges"] = {
        "CategoricalParameterRanges": [{"Name": "alpha", "Values": ["0.9", "0.0", "1.0", "0.3", "0.8"]}]
    }
    sm.create_hyper_parameter_tuning_job(**p)
    d = wait(sm, "tune-auto")
    assert d["HyperParameterTuningJobStatus"] == "Completed"
    assert d["HyperParameterTuningJobConfig"]["TrainingJobEarlyStoppingType"] == "Auto"
    jobs = jobs_of(sm, "tune-auto")
    assert [j["HyperParameters"]["alpha"] for j in jobs] == ["0.9", "0.0", "1.0", "0.3", "0.8"]
    assert [j["TrainingJobStatus"] for j in jobs] == ["Completed", "Completed", "Stopped", "Completed", "Stopped"]
    assert d["TrainingJobStatusCounters"]["Completed"] == 3 and d["TrainingJobStatusCounters"]["Stopped"] == 2
    assert d["ObjectiveStatusCounters"] == {"Succeeded": 5, "Pending": 0, "Failed": 0}
    for j in jobs:
        assert final(j, "score") == pytest.approx(1 - (float(j["HyperParameters"]["alpha"]) - 0.3) ** 2, abs=1e-6)
        assert (final(j, "epoch") == 10) == (j["TrainingJobStatus"] == "Completed")  # the stopped ones ran less
    assert d["BestTrainingJob"]["TunedHyperParameters"] == {"alpha": "0.3"}


@pytest.mark.slow  # make test-slow
def test_hyperband_stops_the_weak_early_and_the_rest_at_max_resource(up: UpProcess) -> None:
    sm, s3 = clients(up)
    p = per_epoch(s3, "tune-hyperband", "Hyperband", jobs=6, epochs=20, pace=0.4)
    config = p["HyperParameterTuningJobConfig"]
    config["StrategyConfig"] = {"HyperbandStrategyConfig": {"MinResource": 2, "MaxResource": 6}}
    config["RandomSeed"] = 5  # its draws put some jobs in the bracket that decides at 2 epochs, where they lose
    sm.create_hyper_parameter_tuning_job(**p)
    d = wait(sm, "tune-hyperband")
    assert d["HyperParameterTuningJobStatus"] == "Completed"
    assert d["HyperParameterTuningJobConfig"]["StrategyConfig"]["HyperbandStrategyConfig"]["MaxResource"] == 6
    jobs = jobs_of(sm, "tune-hyperband")
    # no job runs its 20 epochs: Hyperband stops each one, the weak after 2 and the others at MaxResource
    assert d["TrainingJobStatusCounters"]["Stopped"] == 6 and d["ObjectiveStatusCounters"]["Succeeded"] == 6
    epochs = {j["TrainingJobName"]: final(j, "epoch") for j in jobs}
    assert all(2 <= e < 20 for e in epochs.values())
    full = [j for j in jobs if epochs[j["TrainingJobName"]] >= 6]
    assert full and len(full) < len(jobs)
    best = d["BestTrainingJob"]
    assert epochs[best["TrainingJobName"]] >= 6
    assert best["FinalHyperParameterTuningJobObjectiveMetric"]["Value"] == max(final(j, "score") for j in jobs)


# ---- warm start ---------------------------------------------------------------------------------------------------
def test_a_warm_start_continues_from_its_parent(up: UpProcess) -> None:
    sm, s3 = clients(up)
    parent = tuning(s3, "tune-parent", "Bayesian", jobs=3, parallel=2)
    sm.create_hyper_parameter_tuning_job(**parent)
    first = wait(sm, "tune-parent")
    assert first["HyperParameterTuningJobStatus"] == "Completed"
    child = json.loads(json.dumps(parent))  # the same image, data and hyperparameters: IdenticalDataAndAlgorithm
    child["HyperParameterTuningJobName"] = "tune-child"
    child["HyperParameterTuningJobConfig"]["ResourceLimits"] = {
        "MaxNumberOfTrainingJobs": 2,
        "MaxParallelTrainingJobs": 2,
    }
    child["WarmStartConfig"] = {
        "ParentHyperParameterTuningJobs": [{"HyperParameterTuningJobName": "tune-parent"}],
        "WarmStartType": "IdenticalDataAndAlgorithm",
    }
    sm.create_hyper_parameter_tuning_job(**child)
    d = wait(sm, "tune-child")
    assert d["HyperParameterTuningJobStatus"] == "Completed"
    assert d["WarmStartConfig"] == child["WarmStartConfig"]
    assert d["TrainingJobStatusCounters"]["Completed"] == 2  # its own jobs; the parent's are not run again
    values = [
        first["BestTrainingJob"]["FinalHyperParameterTuningJobObjectiveMetric"]["Value"],
        d["BestTrainingJob"]["FinalHyperParameterTuningJobObjectiveMetric"]["Value"],
    ]
    assert d["OverallBestTrainingJob"]["FinalHyperParameterTuningJobObjectiveMetric"]["Value"] == max(values)
    # a parent that does not exist, and a new image under IdenticalDataAndAlgorithm: refused, naming what is wrong
    orphan = json.loads(json.dumps(child))
    orphan["HyperParameterTuningJobName"] = "tune-orphan"
    orphan["WarmStartConfig"]["ParentHyperParameterTuningJobs"].append({"HyperParameterTuningJobName": "tune-nobody"})
    with pytest.raises(sm.exceptions.ClientError, match="do not exist: tune-nobody") as err:
        sm.create_hyper_parameter_tuning_job(**orphan)
    assert err.value.response["Error"]["Code"] == "ValidationException"
    moved = json.loads(json.dumps(child))
    moved["HyperParameterTuningJobName"] = "tune-moved"
    moved["TrainingJobDefinition"]["AlgorithmSpecification"]["TrainingImage"] = IMAGE.replace("1.2-1", "1.0-1")
    with pytest.raises(sm.exceptions.ClientError, match="use WarmStartType TransferLearning"):
        sm.create_hyper_parameter_tuning_job(**moved)
    with pytest.raises(sm.exceptions.ClientError, match="must be Off with the Hyperband strategy"):
        hyperband = per_epoch(s3, "tune-bad", "Hyperband", jobs=1, epochs=3, pace=0)
        hyperband["HyperParameterTuningJobConfig"]["TrainingJobEarlyStoppingType"] = "Auto"
        sm.create_hyper_parameter_tuning_job(**hyperband)
