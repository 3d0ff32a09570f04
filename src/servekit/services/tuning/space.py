"""A tuning job's search space (``ParameterRanges``) and the strategies that pick the next hyperparameters. Pure:
time and randomness come in (a seed), so tests replay a search."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol


class SpaceError(ValueError):
    """A search space or strategy SageMaker (or servekit) refuses; the message says why."""


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # "integer", "continuous", "categorical"
    low: float = 0.0
    high: float = 0.0
    log: bool = False
    values: tuple[str, ...] = ()


def parse(ranges: Mapping[str, Any]) -> list[Param]:
    out: list[Param] = []
    for kind, key in (("integer", "IntegerParameterRanges"), ("continuous", "ContinuousParameterRanges")):
        for r in ranges.get(key) or []:
            try:
                low, high = float(r["MinValue"]), float(r["MaxValue"])
            except (KeyError, ValueError):
                raise SpaceError(f"{r.get('Name')}: MinValue and MaxValue must be numbers") from None
            if low > high:
                raise SpaceError(f"{r['Name']}: MinValue {low:g} is above MaxValue {high:g}")
            scaling = r.get("ScalingType", "Auto")
            if scaling in ("Logarithmic", "ReverseLogarithmic") and low <= 0:
                raise SpaceError(f"{r['Name']}: logarithmic scaling needs MinValue > 0")
            out.append(Param(r["Name"], kind, low, high, scaling == "Logarithmic"))
    for r in ranges.get("CategoricalParameterRanges") or []:
        if not r.get("Values"):
            raise SpaceError(f"{r.get('Name')}: a categorical range needs Values")
        out.append(Param(r["Name"], "categorical", values=tuple(str(v) for v in r["Values"])))
    if not out:
        hint = " (Autotune's AutoParameters keep their ValueHint here: name a range to tune)" if auto(ranges) else ""
        raise SpaceError(f"ParameterRanges names no hyperparameter to tune{hint}")
    names = [p.name for p in out]
    if len(set(names)) != len(names):
        raise SpaceError("a hyperparameter is named in more than one range")
    return out


def auto(ranges: Mapping[str, Any]) -> dict[str, str]:
    """Autotune's ``AutoParameters`` (the SDK sends each hyperparameter not kept static, with its value as the
    hint): servekit's Autotune keeps each at its ``ValueHint`` and tunes the ranges given. SageMaker chooses ranges
    for some of them from what it knows of each algorithm (docs/training-jobs.md)."""
    return {str(a["Name"]): str(a.get("ValueHint", "")) for a in ranges.get("AutoParameters") or []}


def text(param: Param, value: Any) -> str:
    """A tuned value as SageMaker hands it to the training job (a string)."""
    if param.kind == "integer":
        return str(round(float(value)))
    if param.kind == "continuous":
        return repr(float(value))
    return str(value)


def native(param: Param, value: str) -> Any | None:
    """A hyperparameter's string (as a training job got it) as the range's own value, or None when it is not one
    the range holds (a warm start's parent searched other ranges)."""
    if param.kind == "categorical":
        return value if value in param.values else None
    try:
        number = float(value.strip().strip('"'))
    except ValueError:
        return None
    if not param.low <= number <= param.high:
        return None
    if param.kind == "integer":
        return round(number) if number == round(number) else None
    return number


class Strategy(Protocol):
    """Picks each training job's hyperparameters (``suggest``) and learns from its objective (``observe``); both
    keyed by the training job's name. ``seed`` hands it results known before the search starts (a warm start's
    parents) and answers how many it could use."""

    def suggest(self, job: str) -> dict[str, str] | None: ...

    def observe(self, job: str, value: float | None) -> None: ...

    def seed(self, history: Sequence[tuple[Mapping[str, str], float]]) -> int: ...


class RandomSearch:
    """Independent draws: a result changes nothing, so a warm start's history is not used either."""

    def __init__(self, params: list[Param], seed: int) -> None:
        self.params = params
        self.rng = random.Random(seed)

    def _one(self, p: Param) -> Any:
        if p.kind == "categorical":
            return self.rng.choice(p.values)
        if p.log:
            x = math.exp(self.rng.uniform(math.log(p.low), math.log(p.high)))
        else:
            x = self.rng.uniform(p.low, p.high)
        return self.rng.randint(int(p.low), int(p.high)) if p.kind == "integer" else x

    def suggest(self, job: str) -> dict[str, str] | None:
        return {p.name: text(p, self._one(p)) for p in self.params}

    def observe(self, job: str, value: float | None) -> None:
        pass

    def seed(self, history: Sequence[tuple[Mapping[str, str], float]]) -> int:
        return 0


class GridSearch:
    """Every combination once (categorical and integer ranges only, as SageMaker's Grid requires)."""

    def __init__(self, params: list[Param]) -> None:
        axes = []
        for p in params:
            if p.kind == "continuous":
                raise SpaceError(f"the Grid strategy takes categorical and integer ranges only, not {p.name}")
            axes.append(p.values if p.kind == "categorical" else [str(v) for v in range(int(p.low), int(p.high) + 1)])
        self.names = [p.name for p in params]
        self._it = itertools.product(*axes)

    def suggest(self, job: str) -> dict[str, str] | None:
        combo = next(self._it, None)
        return None if combo is None else dict(zip(self.names, combo, strict=True))

    def observe(self, job: str, value: float | None) -> None:
        pass

    def seed(self, history: Sequence[tuple[Mapping[str, str], float]]) -> int:
        return 0


def _optuna() -> Any:
    try:
        import optuna
    except ImportError:
        raise SpaceError(
            "the Bayesian and Hyperband strategies need Optuna: pip install 'servekit[tuning]' (or use the Random "
            "strategy)"
        ) from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


class BayesianSearch:
    """Optuna's TPE sampler through its ask/tell interface, seeded; the objective's direction from the job. The
    study's name comes from the seed too, so everything Optuna derives from it (Hyperband's brackets) replays."""

    def __init__(self, params: list[Param], seed: int, maximize: bool, pruner: Any = None) -> None:
        optuna = self.optuna = _optuna()
        self.params = params
        self.study = optuna.create_study(
            study_name=f"servekit-{seed}",
            direction="maximize" if maximize else "minimize",
            sampler=optuna.samplers.TPESampler(seed=seed),
            pruner=pruner if pruner is not None else optuna.pruners.NopPruner(),
        )
        self.trials: dict[str, Any] = {}

    def _distribution(self, p: Param) -> Any:
        d = self.optuna.distributions
        if p.kind == "categorical":
            return d.CategoricalDistribution(list(p.values))
        if p.kind == "integer":
            return d.IntDistribution(int(p.low), int(p.high), log=p.log)
        return d.FloatDistribution(p.low, p.high, log=p.log)

    def suggest(self, job: str) -> dict[str, str] | None:
        trial = self.study.ask({p.name: self._distribution(p) for p in self.params})
        self.trials[job] = trial
        return {p.name: text(p, trial.params[p.name]) for p in self.params}

    def observe(self, job: str, value: float | None) -> None:
        trial = self.trials.pop(job, None)
        if trial is None:
            return
        if value is None or not math.isfinite(value):
            self.study.tell(trial, state=self.optuna.trial.TrialState.FAIL)
        else:
            self.study.tell(trial, value)

    def seed(self, history: Sequence[tuple[Mapping[str, str], float]]) -> int:
        """Earlier results as finished trials (``study.add_trial``): those whose every tuned hyperparameter lies in
        this search's ranges and whose objective is a number."""
        used = 0
        distributions = {p.name: self._distribution(p) for p in self.params}
        for hyperparameters, value in history:
            values = {
                p.name: native(p, hyperparameters[p.name]) if p.name in hyperparameters else None for p in self.params
            }
            if any(v is None for v in values.values()) or not math.isfinite(value):
                continue
            self.study.add_trial(
                self.optuna.trial.create_trial(params=values, distributions=distributions, value=value)
            )
            used += 1
        return used


class HyperbandSearch(BayesianSearch):
    """SageMaker's Hyperband: each training job reports its objective once per epoch (its resource) and Optuna's
    HyperbandPruner (successive halving in brackets, reduction factor 3, asynchronous as in ASHA) stops it at a
    rung where it is not among the best; a job that reaches ``max_resource`` epochs is stopped there. Never before
    ``min_resource`` epochs. The next hyperparameters come from TPE, which learns from stopped jobs too.

    :meth:`progress` is the decision: the job's objective values so far in, the reason to stop it now out (once
    per job). Nothing here reads a clock or a file, and the seed fixes every draw and bracket, so a test replays a
    search exactly."""

    REDUCTION_FACTOR = 3

    def __init__(self, params: list[Param], seed: int, maximize: bool, min_resource: int, max_resource: int) -> None:
        optuna = _optuna()
        pruner = optuna.pruners.HyperbandPruner(
            min_resource=min_resource, max_resource=max_resource, reduction_factor=self.REDUCTION_FACTOR
        )
        super().__init__(params, seed, maximize, pruner)
        self.min_resource, self.max_resource = min_resource, max_resource
        self.reported: dict[str, int] = {}
        self.stopped: dict[str, str] = {}

    def launched(self, job: str) -> None:
        pass

    def progress(self, job: str, values: Sequence[float]) -> str | None:
        trial = self.trials.get(job)
        if trial is None or job in self.stopped:
            return None
        for step in range(self.reported.get(job, 0) + 1, min(len(values), self.max_resource) + 1):
            trial.report(values[step - 1], step)
            self.reported[job] = step
            if trial.should_prune():
                reason = f"Hyperband stopped it after {step} epoch(s): its objective is not among the best there"
                self.stopped[job] = "pruned"
                return reason
        if len(values) >= self.max_resource:
            self.stopped[job] = "max"
            return f"Hyperband stopped it at MaxResource ({self.max_resource} epochs)"
        return None

    def ended(self, job: str, values: Sequence[float]) -> None:
        """A job that ended by itself still enters the rungs it reached, for the jobs that come after it."""
        trial = self.trials.get(job)
        if trial is None or job in self.stopped:
            return
        for step in range(self.reported.get(job, 0) + 1, min(len(values), self.max_resource) + 1):
            trial.report(values[step - 1], step)
            self.reported[job] = step
            trial.should_prune()  # records the rung's value; the answer no longer matters

    def observe(self, job: str, value: float | None) -> None:
        self.reported.pop(job, None)
        if self.stopped.pop(job, None) == "pruned" and job in self.trials:
            self.study.tell(self.trials.pop(job), state=self.optuna.trial.TrialState.PRUNED)
            return
        super().observe(job, value)


MAX_RESOURCE_LIMIT = 20000  # SageMaker's most epochs for Hyperband
EPOCH_KEYS = ("epochs", "numepochs", "n-epochs", "n_epochs", "num_epochs")


def hyperband_resources(config: Mapping[str, Any], static: Mapping[str, str]) -> tuple[int, int]:
    """``HyperbandStrategyConfig``'s ``MinResource`` (default 1) and ``MaxResource``, which SageMaker infers from
    a static ``epochs`` (or ``numepochs``, ``n-epochs``, ``n_epochs``, ``num_epochs``) hyperparameter when absent."""
    low = int(config.get("MinResource", 1))
    high = config.get("MaxResource")
    if high is None:
        for key in EPOCH_KEYS:
            if key in static:
                try:
                    high = int(float(str(static[key]).strip().strip('"')))
                except ValueError:
                    raise SpaceError(
                        f"MaxResource cannot be inferred from the static hyperparameter {key}={static[key]!r}: give "
                        "StrategyConfig.HyperbandStrategyConfig.MaxResource"
                    ) from None
                break
        else:
            raise SpaceError(
                "the Hyperband strategy needs StrategyConfig.HyperbandStrategyConfig.MaxResource, or a static "
                f"hyperparameter it can be inferred from ({', '.join(EPOCH_KEYS)})"
            )
    high = int(high)
    if not 1 <= high <= MAX_RESOURCE_LIMIT:
        raise SpaceError(f"MaxResource must be between 1 and {MAX_RESOURCE_LIMIT} epochs, not {high}")
    if low > high:
        raise SpaceError(f"MinResource {low} is above MaxResource {high}")
    return low, high


def strategy(
    name: str, params: list[Param], seed: int, maximize: bool, resources: tuple[int, int] | None = None
) -> Strategy:
    """The named strategy; ``resources`` is Hyperband's (MinResource, MaxResource)."""
    if name == "Random":
        return RandomSearch(params, seed)
    if name == "Grid":
        return GridSearch(params)
    if name == "Bayesian":
        return BayesianSearch(params, seed, maximize)
    if name == "Hyperband":
        if resources is None:
            raise SpaceError("the Hyperband strategy needs its MinResource and MaxResource")
        return HyperbandSearch(params, seed, maximize, *resources)
    raise SpaceError(f"the {name} strategy is not supported here: use Bayesian, Random, Grid or Hyperband")
