"""A warm start's rules against its parents, the history it seeds a search with, and the overall best job."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from servekit.services.tuning.warmstart import Parent, WarmStartError, check, history, overall_best


def request(**changes: Any) -> dict[str, Any]:
    p: dict[str, Any] = {
        "HyperParameterTuningJobName": "child",
        "HyperParameterTuningJobConfig": {
            "Strategy": "Bayesian",
            "HyperParameterTuningJobObjective": {"Type": "Maximize", "MetricName": "score"},
            "ResourceLimits": {"MaxNumberOfTrainingJobs": 4, "MaxParallelTrainingJobs": 1},
            "ParameterRanges": {
                "ContinuousParameterRanges": [{"Name": "alpha", "MinValue": "0", "MaxValue": "1"}],
                "CategoricalParameterRanges": [{"Name": "kind", "Values": ["a", "b"]}],
            },
        },
        "TrainingJobDefinition": {
            "StaticHyperParameters": {"depth": "2", "sagemaker_program": '"train.py"'},
            "AlgorithmSpecification": {"TrainingImage": "img:1"},
            "InputDataConfig": [
                {"ChannelName": "train", "DataSource": {"S3DataSource": {"S3Uri": "s3://b/data"}}},
            ],
        },
        "WarmStartConfig": {
            "ParentHyperParameterTuningJobs": [{"HyperParameterTuningJobName": "parent"}],
            "WarmStartType": "IdenticalDataAndAlgorithm",
        },
    }
    for path, value in changes.items():
        *keys, last = path.split("__")
        node = p
        for k in keys:
            node = node[k]
        node[last] = value
    return p


def summary(job: str, status: str, value: float | None, **tuned: str) -> dict[str, Any]:
    s: dict[str, Any] = {"TrainingJobName": job, "TrainingJobStatus": status, "TunedHyperParameters": tuned}
    if value is not None:
        s["FinalHyperParameterTuningJobObjectiveMetric"] = {"Type": "Maximize", "MetricName": "score", "Value": value}
    return s


def parent(name: str = "parent", status: str = "Completed", req: dict[str, Any] | None = None) -> Parent:
    details = {
        "TrainingJobs": [
            summary("p-1", "Completed", 0.7, alpha="0.2", kind="a"),
            summary("p-2", "Stopped", 0.9, alpha="0.25", kind="a"),
            summary("p-3", "Failed", None, alpha="0.9", kind="b"),
            summary("p-4", "Completed", 0.8, alpha="0.4", kind="b"),
        ],
        "BestTrainingJob": summary("p-4", "Completed", 0.8, alpha="0.4", kind="b"),
    }
    return Parent(name, status, copy.deepcopy(req or request()), details)


def test_a_parent_like_its_child_passes() -> None:
    check(request(), {"parent": parent()})
    swapped = request()  # a hyperparameter may move from tunable to static: the count stays
    swapped["HyperParameterTuningJobConfig"]["ParameterRanges"].pop("CategoricalParameterRanges")
    swapped["TrainingJobDefinition"]["StaticHyperParameters"]["kind"] = "a"
    check(swapped, {"parent": parent()})


@pytest.mark.parametrize(
    ("child", "parents", "message"),
    [
        (request(), {"parent": None, "other": None}, "do not exist: parent, other"),
        (request(), {"parent": parent(status="InProgress")}, "parent is InProgress"),
        (
            request(
                HyperParameterTuningJobConfig__HyperParameterTuningJobObjective={
                    "Type": "Minimize",
                    "MetricName": "score",
                }
            ),
            {"parent": parent()},
            r"objective \(Minimize score\) differs from the parent tuning job parent's \(Maximize score\)",
        ),
        (
            request(
                HyperParameterTuningJobConfig__ParameterRanges={
                    "IntegerParameterRanges": [{"Name": "alpha", "MinValue": "0", "MaxValue": "1"}],
                    "CategoricalParameterRanges": [{"Name": "kind", "Values": ["a", "b"]}],
                }
            ),
            {"parent": parent()},
            "alpha is integer here but continuous in the parent tuning job parent",
        ),
        (
            request(TrainingJobDefinition__StaticHyperParameters={"sagemaker_program": '"train.py"'}),
            {"parent": parent()},
            "has 3 static plus tunable hyperparameters and the parent tuning job parent has 4",
        ),
        (
            request(TrainingJobDefinition__AlgorithmSpecification={"TrainingImage": "img:2"}),
            {"parent": parent()},
            "IdenticalDataAndAlgorithm needs the parent tuning job parent's training image and input channels",
        ),
    ],
)
def test_broken_rules_name_the_parent_and_why(
    child: dict[str, Any], parents: dict[str, Parent | None], message: str
) -> None:
    with pytest.raises(WarmStartError, match=message):
        check(child, parents)


def test_identical_data_is_the_same_image_and_channels_wherever_the_data_lies() -> None:
    """The SDK's RecordSet uploads the same data under a new key for each tuner: SageMaker takes such a child."""
    moved = request()
    moved["TrainingJobDefinition"]["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"] = "s3://b/again"
    check(moved, {"parent": parent()})
    renamed = request()
    renamed["TrainingJobDefinition"]["InputDataConfig"][0]["ChannelName"] = "other"
    with pytest.raises(WarmStartError, match="training image and input channels"):
        check(renamed, {"parent": parent()})
    # the objective SageMaker adds to a stored job's static hyperparameters is not one of the user's
    stored = request()
    stored["TrainingJobDefinition"]["StaticHyperParameters"]["_tuning_objective_metric"] = "validation:rmse"
    check(request(), {"parent": parent(req=stored)})


def test_transfer_learning_takes_new_data_and_a_new_image() -> None:
    child = request(TrainingJobDefinition__AlgorithmSpecification={"TrainingImage": "img:2"})
    child["WarmStartConfig"]["WarmStartType"] = "TransferLearning"
    child["TrainingJobDefinition"]["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"] = "s3://b/new"
    check(child, {"parent": parent()})


def test_history_is_the_parents_completed_jobs_with_their_static_hyperparameters() -> None:
    seen = history([parent(), parent("second")])
    assert len(seen) == 4  # two completed jobs with a value each; stopped and failed ones are not seeds
    hp, value = seen[0]
    assert value == 0.7 and hp == {"depth": "2", "sagemaker_program": '"train.py"', "alpha": "0.2", "kind": "a"}


def test_overall_best_is_the_best_of_the_job_and_its_parents() -> None:
    mine = summary("c-1", "Completed", 0.75, alpha="0.3", kind="a")
    assert overall_best(mine, [parent()], maximize=True) == parent().details["BestTrainingJob"]
    assert overall_best(mine, [parent()], maximize=False) == mine
    assert overall_best(None, [], maximize=True) is None
