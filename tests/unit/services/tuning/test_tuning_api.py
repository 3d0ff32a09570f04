"""The tuning API's search with stoppers, on the virtual clock: a fake training service whose jobs write one
objective value per (virtual) second to their log and end Completed, or Stopped when the tuning job stops them.
Early stopping (Auto), Hyperband and warm start through CreateHyperParameterTuningJob / Describe, and the
ValidationExceptions that refuse what cannot run."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from servekit.aws.errors import ApiError
from servekit.aws.names import Account
from servekit.services.database import StateDB
from servekit.services.training.metrics import final_metrics
from servekit.services.training.runner import KIND as TRAINING
from servekit.services.training.store import SageMakerJobRow, SageMakerJobs
from servekit.services.tuning.api import TuningJobsApi
from servekit.services.tuning.stopping import median_rule
from servekit.testing.clock import run_virtual

METRICS = [{"Name": "score", "Regex": r"score=([-0-9.e]+)"}, {"Name": "epoch", "Regex": r"epoch=(\d+)"}]
Curve = Callable[[dict[str, str]], list[float]]


class FakeRunner:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.running: dict[str, asyncio.Event] = {}
        self.reasons: dict[str, str] = {}

    def log_path(self, name: str) -> Path:
        return self.root / name / "algo-1.log"

    def stop(self, name: str, reason: str = "") -> bool:
        event = self.running.get(name)
        if event is None:
            return False
        self.reasons[name] = reason
        event.set()
        return True


class FakeTraining:
    """Each job prints ``epoch=<n> score=<v>`` once a virtual second, its values from ``curve`` (of its
    hyperparameters), and ends Completed or, stopped, Stopped, with its log's FinalMetricDataList either way (as
    the training runner does)."""

    def __init__(self, jobs: SageMakerJobs, root: Path, curve: Curve) -> None:
        self.jobs = jobs
        self.runner = FakeRunner(root)
        self.curve = curve
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.epochs: dict[str, int] = {}

    def launch(self, p: dict[str, Any], tuning_arn: str | None = None) -> dict[str, Any]:
        name = p["TrainingJobName"]
        self.jobs.create(TRAINING, name, f"arn:training/{name}", p, "InProgress", "Starting")
        self.jobs.update(TRAINING, name, details={"TuningJobArn": tuning_arn, "TrainingStartTime": 1.0})
        self.runner.running[name] = asyncio.Event()
        self.tasks[name] = asyncio.create_task(self._run(name, p["HyperParameters"]))
        return {"TrainingJobArn": f"arn:training/{name}"}

    async def _run(self, name: str, hyperparameters: dict[str, str]) -> None:
        log = self.runner.log_path(name)
        log.parent.mkdir(parents=True)
        stop = self.runner.running[name]
        for epoch, value in enumerate(self.curve(hyperparameters), 1):
            with log.open("a") as f:
                f.write(f"epoch={epoch} score={value}\n")
            self.epochs[name] = epoch
            try:
                await asyncio.wait_for(stop.wait(), 1.0)
                break
            except TimeoutError:
                continue
        del self.runner.running[name]
        metrics = final_metrics(METRICS, log.read_text(), 2.0)
        if stop.is_set():
            self.jobs.update(
                TRAINING,
                name,
                status="Stopped",
                secondary="Stopped",
                reason=self.runner.reasons[name],
                details={"FinalMetricDataList": metrics},
                final=True,
            )
            return
        self.jobs.update(
            TRAINING,
            name,
            status="Completed",
            secondary="Completed",
            details={"FinalMetricDataList": metrics},
            final=True,
        )

    async def wait(self, name: str) -> SageMakerJobRow:
        await self.tasks[name]
        row = self.jobs.get(TRAINING, name)
        assert row is not None
        return row


@pytest.fixture
def db(tmp_path: Path) -> Iterator[StateDB]:
    with StateDB.open(tmp_path / "home") as d:
        yield d


def quality(hp: dict[str, str]) -> float:
    return round(1 - (float(hp["alpha"]) - 0.3) ** 2, 6)


def tuning(name: str, strategy: str, jobs: int, parallel: int = 1, **config: Any) -> dict[str, Any]:
    return {
        "HyperParameterTuningJobName": name,
        "HyperParameterTuningJobConfig": {
            "Strategy": strategy,
            "HyperParameterTuningJobObjective": {"Type": "Maximize", "MetricName": "score"},
            "ResourceLimits": {"MaxNumberOfTrainingJobs": jobs, "MaxParallelTrainingJobs": parallel},
            "ParameterRanges": {"ContinuousParameterRanges": [{"Name": "alpha", "MinValue": "0", "MaxValue": "1"}]},
            "RandomSeed": 4,
            **config,
        },
        "TrainingJobDefinition": {
            "StaticHyperParameters": {"sagemaker_program": '"train.py"'},
            "AlgorithmSpecification": {"TrainingImage": "img", "MetricDefinitions": METRICS},
            "InputDataConfig": [{"ChannelName": "train", "DataSource": {"S3DataSource": {"S3Uri": "s3://b/d"}}}],
            "OutputDataConfig": {"S3OutputPath": "s3://b/out"},
        },
    }


def api_with(db: StateDB, tmp_path: Path, curve: Curve) -> tuple[TuningJobsApi, FakeTraining]:
    training = FakeTraining(db.sagemaker_jobs, tmp_path / "training", curve)
    return TuningJobsApi(db.sagemaker_jobs, cast(Any, training), Account(), poll_s=0.25), training


async def finished(api: TuningJobsApi, name: str) -> dict[str, Any]:
    task = api._tasks.tasks.get(name)
    if task is not None:
        await task
    return await api.describe({"HyperParameterTuningJobName": name})


async def summaries(api: TuningJobsApi, name: str) -> list[dict[str, Any]]:
    out = await api.list_training_jobs(
        {"HyperParameterTuningJobName": name, "SortOrder": "Ascending", "MaxResults": 100}
    )
    return cast(list[dict[str, Any]], out["TrainingJobSummaries"])


def test_early_stopping_stops_the_jobs_below_the_median_of_the_earlier_ones(db: StateDB, tmp_path: Path) -> None:
    api, training = api_with(db, tmp_path, lambda hp: [quality(hp)] * 10)  # a flat curve: its running average

    async def main() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        await api.create(tuning("auto", "Random", jobs=8, TrainingJobEarlyStoppingType="Auto"))
        return await finished(api, "auto"), await summaries(api, "auto")

    d, jobs = run_virtual(main)
    assert d["HyperParameterTuningJobStatus"] == "Completed"
    assert d["HyperParameterTuningJobConfig"]["TrainingJobEarlyStoppingType"] == "Auto"
    qualities = [quality(j["TunedHyperParameters"]) for j in jobs]
    expected: list[int] = []  # each job's epochs under SageMaker's rule, one job after another
    for q in qualities:
        earlier = [[e] * n for e, n in zip(qualities, expected, strict=False)]
        stops = [n for n in range(1, 11) if median_rule([q] * n, earlier, True) is not None]
        expected.append(stops[0] if stops else 10)
    assert [training.epochs[j["TrainingJobName"]] for j in jobs] == expected
    assert [j["TrainingJobStatus"] for j in jobs] == ["Stopped" if n < 10 else "Completed" for n in expected]
    stopped = sum(n < 10 for n in expected)
    assert 0 < stopped < len(jobs)
    assert d["TrainingJobStatusCounters"]["Stopped"] == stopped
    assert d["TrainingJobStatusCounters"]["Completed"] == len(jobs) - stopped
    assert d["ObjectiveStatusCounters"] == {"Succeeded": 8, "Pending": 0, "Failed": 0}
    for j, n in zip(jobs, expected, strict=True):
        assert j["FinalHyperParameterTuningJobObjectiveMetric"]["Value"] == quality(j["TunedHyperParameters"])
        if n < 10:  # what its log said became its final metrics
            row = db.sagemaker_jobs.get(TRAINING, j["TrainingJobName"])
            assert row is not None and row.status == "Stopped"
            assert {m["MetricName"]: m["Value"] for m in row.details["FinalMetricDataList"]}["epoch"] == n
            assert "Early stopping" in training.runner.reasons[j["TrainingJobName"]]
    assert d["BestTrainingJob"]["FinalHyperParameterTuningJobObjectiveMetric"]["Value"] == max(qualities)


def test_hyperband_gives_the_weak_few_epochs_and_stops_everyone_at_max_resource(db: StateDB, tmp_path: Path) -> None:
    api, training = api_with(db, tmp_path, lambda hp: [quality(hp) - 0.5 / e for e in range(1, 100)])
    request = tuning("hb", "Hyperband", jobs=10, parallel=2)
    request["TrainingJobDefinition"]["StaticHyperParameters"]["epochs"] = "9"  # MaxResource from it

    async def main() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        await api.create(request)
        return await finished(api, "hb"), await summaries(api, "hb")

    d, jobs = run_virtual(main)
    assert d["HyperParameterTuningJobStatus"] == "Completed"
    assert d["TrainingJobStatusCounters"]["Stopped"] == 10  # a curve of 99 epochs ends only when Hyperband says
    assert d["ObjectiveStatusCounters"]["Succeeded"] == 10
    epochs = {j["TrainingJobName"]: training.epochs[j["TrainingJobName"]] for j in jobs}
    assert set(epochs.values()) <= {1, 3, 9} and min(epochs.values()) < 9 and max(epochs.values()) == 9
    best = d["BestTrainingJob"]
    assert epochs[best["TrainingJobName"]] == 9
    assert best["FinalHyperParameterTuningJobObjectiveMetric"]["Value"] == max(
        j["FinalHyperParameterTuningJobObjectiveMetric"]["Value"] for j in jobs
    )


def test_a_warm_start_learns_from_its_parent_and_names_the_overall_best(
    db: StateDB, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="servekit.services.tuning.api")
    api, _training = api_with(db, tmp_path, lambda hp: [quality(hp)] * 2)

    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        await api.create(tuning("parent", "Bayesian", jobs=4, parallel=2))
        parent = await finished(api, "parent")
        child = tuning("child", "Bayesian", jobs=2)
        child["WarmStartConfig"] = {
            "ParentHyperParameterTuningJobs": [{"HyperParameterTuningJobName": "parent"}],
            "WarmStartType": "IdenticalDataAndAlgorithm",
        }
        await api.create(child)
        return parent, await finished(api, "child")

    parent, child = run_virtual(main)
    assert child["HyperParameterTuningJobStatus"] == "Completed"
    assert child["WarmStartConfig"]["WarmStartType"] == "IdenticalDataAndAlgorithm"
    assert child["HyperParameterTuningJobConfig"]["TrainingJobEarlyStoppingType"] == "Off"
    assert child["TrainingJobStatusCounters"]["Completed"] == 2  # the parent's jobs are not run again
    scores = [
        parent["BestTrainingJob"]["FinalHyperParameterTuningJobObjectiveMetric"]["Value"],
        child["BestTrainingJob"]["FinalHyperParameterTuningJobObjectiveMetric"]["Value"],
    ]
    assert child["OverallBestTrainingJob"]["FinalHyperParameterTuningJobObjectiveMetric"]["Value"] == max(scores)
    assert "tuning job child: 4 result(s) of its parents seed the search" in caplog.messages
    # SageMaker's reserved hyperparameter: the objective, in the description and in each training job's
    statics = child["TrainingJobDefinition"]["StaticHyperParameters"]
    assert statics == {"sagemaker_program": '"train.py"', "_tuning_objective_metric": "score"}
    job = db.sagemaker_jobs.get(TRAINING, child["BestTrainingJob"]["TrainingJobName"])
    assert job is not None and job.request["HyperParameters"]["_tuning_objective_metric"] == "score"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"Strategy": "Hyperband", "TrainingJobEarlyStoppingType": "Auto"}, "must be Off with the Hyperband strategy"),
        ({"StrategyConfig": {"HyperbandStrategyConfig": {"MaxResource": 3}}}, "is for the Hyperband strategy"),
        ({"Strategy": "Hyperband"}, "needs StrategyConfig.HyperbandStrategyConfig.MaxResource"),
        (
            {
                "Strategy": "Hyperband",
                "StrategyConfig": {"HyperbandStrategyConfig": {"MinResource": 5, "MaxResource": 3}},
            },
            "MinResource 5 is above MaxResource 3",
        ),
    ],
)
def test_what_cannot_run_is_a_validation_exception(
    db: StateDB, tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    api, _training = api_with(db, tmp_path, lambda hp: [1.0])
    request = tuning("bad", "Bayesian", jobs=1)
    request["HyperParameterTuningJobConfig"].update(change)

    async def main() -> None:
        await api.create(request)

    with pytest.raises(ApiError, match=message) as err:
        run_virtual(main)
    assert err.value.code == "ValidationException"
    assert db.sagemaker_jobs.get("tuning", "bad") is None


def test_a_warm_start_from_a_job_that_does_not_exist_names_it(db: StateDB, tmp_path: Path) -> None:
    api, _training = api_with(db, tmp_path, lambda hp: [1.0])
    request = tuning("orphan", "Bayesian", jobs=1)
    request["WarmStartConfig"] = {
        "ParentHyperParameterTuningJobs": [{"HyperParameterTuningJobName": "nobody"}],
        "WarmStartType": "TransferLearning",
    }

    async def main() -> None:
        await api.create(request)

    with pytest.raises(ApiError, match="do not exist: nobody") as err:
        run_virtual(main)
    assert err.value.code == "ValidationException"


def test_autotunes_auto_parameters_keep_their_value_hints(db: StateDB, tmp_path: Path) -> None:
    """The SDK's ``autotune=True`` sends each hyperparameter not kept static as an AutoParameter with its value as
    the hint: servekit's training jobs get the hint (k-means' required ``k``), the given ranges are tuned."""
    api, _training = api_with(db, tmp_path, lambda hp: [quality(hp)])
    request = tuning("auto-hints", "Bayesian", jobs=2)
    request["Autotune"] = {"Mode": "Enabled"}
    request["HyperParameterTuningJobConfig"]["ParameterRanges"]["AutoParameters"] = [{"Name": "k", "ValueHint": "10"}]

    async def main() -> list[dict[str, Any]]:
        await api.create(request)
        await finished(api, "auto-hints")
        return await summaries(api, "auto-hints")

    jobs = run_virtual(main)
    for summary in jobs:
        row = db.sagemaker_jobs.get(TRAINING, summary["TrainingJobName"])
        assert row is not None and row.request["HyperParameters"]["k"] == "10"
        assert set(summary["TunedHyperParameters"]) == {"alpha"}
    only_hints = tuning("hints-only", "Bayesian", jobs=1)
    only_hints["HyperParameterTuningJobConfig"]["ParameterRanges"] = {
        "AutoParameters": [{"Name": "k", "ValueHint": "3"}]
    }
    with pytest.raises(ApiError, match="AutoParameters keep their ValueHint"):
        asyncio.run(api.create(only_hints))


def test_the_sdks_tuning_resource_config_sizes_the_training_jobs(db: StateDB, tmp_path: Path) -> None:
    """The SDK's tuner sends HyperParameterTuningResourceConfig (instance type and count, or InstanceConfigs);
    its training jobs get that ResourceConfig, and Describe answers one (HyperparameterTuner.attach reads it)."""
    api, _training = api_with(db, tmp_path, lambda hp: [quality(hp)])
    request = tuning("sized", "Random", jobs=1)
    request["TrainingJobDefinition"]["HyperParameterTuningResourceConfig"] = {
        "InstanceConfigs": [
            {"InstanceType": "ml.m4.2xlarge", "InstanceCount": 1, "VolumeSizeInGB": 31},
            {"InstanceType": "ml.m4.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30},
        ]
    }

    async def main() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        await api.create(request)
        return await finished(api, "sized"), await summaries(api, "sized")

    described, jobs = run_virtual(main)
    sized = {"InstanceType": "ml.m4.2xlarge", "InstanceCount": 1, "VolumeSizeInGB": 31}
    assert described["TrainingJobDefinition"]["ResourceConfig"] == sized
    row = db.sagemaker_jobs.get(TRAINING, jobs[0]["TrainingJobName"])
    assert row is not None and row.request["ResourceConfig"] == sized
    assert "HyperParameterTuningResourceConfig" not in row.request


def test_a_described_definition_names_a_builtin_algorithms_metrics() -> None:
    """SageMaker fills in a built-in algorithm's MetricDefinitions in DescribeHyperParameterTuningJob (the SDK's
    tuner reads them when it rebuilds a tuner); an image without any answers an empty list."""
    from servekit.services.tuning.api import described_definition

    kmeans = {"AlgorithmSpecification": {"TrainingImage": "382416733822.dkr.ecr.us-east-1.amazonaws.com/kmeans:1"}}
    definitions = described_definition(kmeans)["AlgorithmSpecification"]["MetricDefinitions"]
    assert [d["Name"] for d in definitions] == ["test:msd", "test:ssd"]
    assert re.search(definitions[0]["Regex"], "[0]\ttest-msd:0.25\ttest-ssd:3.5").group(1) == "0.25"  # type: ignore[union-attr]
    assert described_definition({"AlgorithmSpecification": {"TrainingImage": "mine:1"}})["AlgorithmSpecification"] == {
        "TrainingImage": "mine:1",
        "MetricDefinitions": [],
    }
