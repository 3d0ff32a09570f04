"""A tuning job's search space (``ParameterRanges``) and the strategies that pick the next hyperparameters. Pure:
time and randomness come in (a seed), so tests replay a search."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Mapping
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
        raise SpaceError("ParameterRanges names no hyperparameter to tune")
    names = [p.name for p in out]
    if len(set(names)) != len(names):
        raise SpaceError("a hyperparameter is named in more than one range")
    return out


def text(param: Param, value: Any) -> str:
    """A tuned value as SageMaker hands it to the training job (a string)."""
    if param.kind == "integer":
        return str(round(float(value)))
    if param.kind == "continuous":
        return repr(float(value))
    return str(value)


class Strategy(Protocol):
    def suggest(self) -> dict[str, str] | None: ...

    def observe(self, hyperparameters: Mapping[str, str], value: float | None) -> None: ...


class RandomSearch:
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

    def suggest(self) -> dict[str, str] | None:
        return {p.name: text(p, self._one(p)) for p in self.params}

    def observe(self, hyperparameters: Mapping[str, str], value: float | None) -> None:
        pass


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

    def suggest(self) -> dict[str, str] | None:
        combo = next(self._it, None)
        return None if combo is None else dict(zip(self.names, combo, strict=True))

    def observe(self, hyperparameters: Mapping[str, str], value: float | None) -> None:
        pass


class BayesianSearch:
    """Optuna's TPE sampler through its ask/tell interface, seeded; the objective's direction from the job."""

    def __init__(self, params: list[Param], seed: int, maximize: bool) -> None:
        try:
            import optuna
        except ImportError:
            raise SpaceError(
                "the Bayesian strategy needs Optuna: pip install 'servekit[tuning]' (or use the Random strategy)"
            ) from None
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.optuna = optuna
        self.params = params
        self.study = optuna.create_study(
            direction="maximize" if maximize else "minimize", sampler=optuna.samplers.TPESampler(seed=seed)
        )
        self.trials: dict[tuple[tuple[str, str], ...], Any] = {}

    def suggest(self) -> dict[str, str] | None:
        trial = self.study.ask()
        values: dict[str, str] = {}
        for p in self.params:
            if p.kind == "categorical":
                raw: Any = trial.suggest_categorical(p.name, list(p.values))
            elif p.kind == "integer":
                raw = trial.suggest_int(p.name, int(p.low), int(p.high), log=p.log)
            else:
                raw = trial.suggest_float(p.name, p.low, p.high, log=p.log)
            values[p.name] = text(p, raw)
        self.trials[tuple(sorted(values.items()))] = trial
        return values

    def observe(self, hyperparameters: Mapping[str, str], value: float | None) -> None:
        trial = self.trials.pop(
            tuple(sorted((k, v) for k, v in hyperparameters.items() if k in {p.name for p in self.params})), None
        )
        if trial is None:
            return
        if value is None or not math.isfinite(value):
            self.study.tell(trial, state=self.optuna.trial.TrialState.FAIL)
        else:
            self.study.tell(trial, value)


def strategy(name: str, params: list[Param], seed: int, maximize: bool) -> Strategy:
    if name == "Random":
        return RandomSearch(params, seed)
    if name == "Grid":
        return GridSearch(params)
    if name == "Bayesian":
        return BayesianSearch(params, seed, maximize)
    raise SpaceError(f"the {name} strategy is not supported here: use Bayesian, Random or Grid")
