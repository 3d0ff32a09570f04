"""A warm start (``WarmStartConfig``): a tuning job that begins from the results of up to five earlier ones, its
parents. Pure functions over the parents' records:

- :func:`check`: SageMaker's rules, each broken one a message naming the parent (the API answers it as a
  ValidationException): every parent exists and has ended; the objective is the same; no hyperparameter changes type
  (continuous, integer, categorical); the number of static plus tunable hyperparameters is the same; with
  ``IdenticalDataAndAlgorithm`` the training image and the channels' data are the parents'.
- :func:`history`: the parents' completed training jobs as (hyperparameters, objective) for the strategy to learn
  from (Optuna's ``study.add_trial`` for Bayesian and Hyperband). Not recursive: a parent's own parents are not read.
- :func:`overall_best`: ``OverallBestTrainingJob``, the best of this job's best and its parents' best."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from servekit.services.tuning.space import SpaceError, auto, parse

ENDED = ("Completed", "Stopped", "Failed")


class WarmStartError(ValueError):
    """A warm start SageMaker refuses; the message says which parent and why."""


@dataclass(frozen=True)
class Parent:
    """What a warm start reads of a parent tuning job: its request (CreateHyperParameterTuningJob's) and its record."""

    name: str
    status: str
    request: Mapping[str, Any]
    details: Mapping[str, Any]


def _kinds(request: Mapping[str, Any]) -> dict[str, str]:
    try:
        params = parse(request["HyperParameterTuningJobConfig"].get("ParameterRanges") or {})
    except SpaceError:
        return {}
    return {p.name: p.kind for p in params}


# the objective metric SageMaker adds to a tuning job's static hyperparameters (and so to each of its training jobs')
OBJECTIVE_HP = "_tuning_objective_metric"


def _static(request: Mapping[str, Any]) -> dict[str, str]:
    """The static hyperparameters the user gave (without the objective SageMaker adds to a stored job's)."""
    static = (request.get("TrainingJobDefinition") or {}).get("StaticHyperParameters") or {}
    ranges = (request.get("HyperParameterTuningJobConfig") or {}).get("ParameterRanges") or {}
    return {**{k: v for k, v in static.items() if k != OBJECTIVE_HP}, **auto(ranges)}


def _data(request: Mapping[str, Any]) -> tuple[str, list[str]]:
    """The training image and the channels' names: what IdenticalDataAndAlgorithm can hold a child to. Not the
    channels' S3 URIs: the same data may lie under another key (the SDK's RecordSet uploads it anew for each
    tuner), and SageMaker takes such a child."""
    definition = request.get("TrainingJobDefinition") or {}
    image = str((definition.get("AlgorithmSpecification") or {}).get("TrainingImage", ""))
    return image, sorted(str(ch.get("ChannelName")) for ch in definition.get("InputDataConfig") or [])


def check(request: Mapping[str, Any], parents: Mapping[str, Parent | None]) -> None:
    """Raise :class:`WarmStartError` for the first rule ``request`` (CreateHyperParameterTuningJob's) breaks
    against its ``parents`` (by name; None for one that does not exist)."""
    missing = [name for name, parent in parents.items() if parent is None]
    if missing:
        raise WarmStartError(
            f"WarmStartConfig names parent hyperparameter tuning job(s) that do not exist: {', '.join(missing)}"
        )
    warm_type = request["WarmStartConfig"]["WarmStartType"]
    objective = request["HyperParameterTuningJobConfig"].get("HyperParameterTuningJobObjective") or {}
    kinds = _kinds(request)
    names = set(_static(request)) | set(kinds)
    for parent in parents.values():
        assert parent is not None
        if parent.status not in ENDED:
            raise WarmStartError(
                f"The parent tuning job {parent.name} is {parent.status}: a warm start's parents must have ended "
                "(Completed, Stopped or Failed)"
            )
        theirs = parent.request["HyperParameterTuningJobConfig"].get("HyperParameterTuningJobObjective") or {}
        if (theirs.get("MetricName"), theirs.get("Type")) != (objective.get("MetricName"), objective.get("Type")):
            raise WarmStartError(
                f"The objective ({objective.get('Type')} {objective.get('MetricName')}) differs from the parent "
                f"tuning job {parent.name}'s ({theirs.get('Type')} {theirs.get('MetricName')}): a warm start keeps "
                "the objective metric"
            )
        their_kinds = _kinds(parent.request)
        for name, kind in sorted(kinds.items()):
            if name in their_kinds and their_kinds[name] != kind:
                raise WarmStartError(
                    f"The hyperparameter {name} is {kind} here but {their_kinds[name]} in the parent tuning job "
                    f"{parent.name}: a warm start keeps each hyperparameter's type"
                )
        their_names = set(_static(parent.request)) | set(their_kinds)
        if len(their_names) != len(names):
            raise WarmStartError(
                f"This job has {len(names)} static plus tunable hyperparameters and the parent tuning job "
                f"{parent.name} has {len(their_names)}: a warm start keeps their number (a hyperparameter may move "
                "between static and tunable)"
            )
        if warm_type == "IdenticalDataAndAlgorithm" and _data(parent.request) != _data(request):
            raise WarmStartError(
                f"IdenticalDataAndAlgorithm needs the parent tuning job {parent.name}'s training image and input "
                "channels; use WarmStartType TransferLearning for other data or another image"
            )


def history(parents: Sequence[Parent]) -> list[tuple[dict[str, str], float]]:
    """Each parent's completed training jobs with an objective value: the parent's static hyperparameters
    overlaid with the job's tuned ones (so a hyperparameter static there and tunable here is known), and the
    value."""
    out: list[tuple[dict[str, str], float]] = []
    for parent in parents:
        static = _static(parent.request)
        for job in parent.details.get("TrainingJobs") or []:
            metric = job.get("FinalHyperParameterTuningJobObjectiveMetric")
            if job.get("TrainingJobStatus") != "Completed" or not metric:
                continue
            out.append(({**static, **(job.get("TunedHyperParameters") or {})}, float(metric["Value"])))
    return out


def overall_best(best: Mapping[str, Any] | None, parents: Sequence[Parent], maximize: bool) -> Mapping[str, Any] | None:
    """The best training job summary of ``best`` (this job's) and the parents' ``BestTrainingJob``."""
    candidates = [best] if best else []
    candidates += [p.details["BestTrainingJob"] for p in parents if p.details.get("BestTrainingJob")]
    if not candidates:
        return None

    def value(summary: Mapping[str, Any]) -> float:
        v = float(summary["FinalHyperParameterTuningJobObjectiveMetric"]["Value"])
        return v if maximize else -v

    return max(candidates, key=value)
