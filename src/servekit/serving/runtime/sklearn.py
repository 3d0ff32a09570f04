"""scikit-learn estimators (and XGBoost/LightGBM through their sklearn API) saved with joblib."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from servekit.config.models import RuntimeOptions
from servekit.errors import ConfigError
from servekit.serving.runtime.base import UNKNOWN_CONCURRENCY, Servable, find_one, zeros_row
from servekit.serving.runtime.manifest import Manifest
from servekit.types import (
    CLASSIFY_METHOD,
    DEFAULT_SIGNATURE,
    REGRESS_METHOD,
    Signature,
    TensorMap,
    TensorSpec,
    v2_datatype,
)

SUFFIXES = (".joblib", ".pkl", ".pickle")
INPUT = "inputs"


class SklearnServable:
    platform = "sklearn"
    # Estimators run Python between their numpy calls and mostly on one thread: treat them as GIL-bound.
    concurrency = UNKNOWN_CONCURRENCY

    def __init__(self, estimator: Any, manifest: Manifest) -> None:
        self._est = estimator
        n = getattr(estimator, "n_features_in_", None)
        if not isinstance(n, int | np.integer):
            raise ConfigError("estimator has no n_features_in_; is it fitted?")
        self._n = int(n)
        names = getattr(estimator, "feature_names_in_", None)
        features = manifest.feature_names or (tuple(str(f) for f in names) if names is not None else ())
        inp = (TensorSpec(INPUT, "FP64", (-1, self._n)),)
        # A probe row at load time tells the output dtype and checks that the model runs at all.
        probe = np.asarray(estimator.predict(zeros_row(self._n)))
        pred_shape = (-1, *probe.shape[1:])
        sigs: dict[str, Signature] = {s.name: s for s in manifest.signatures}
        predict_sig = Signature(
            DEFAULT_SIGNATURE,
            inp,
            (TensorSpec("predictions", v2_datatype(probe.dtype), pred_shape),),
            feature_names=features,
        )
        sigs.setdefault(DEFAULT_SIGNATURE, predict_sig)
        sigs.setdefault("predict", Signature("predict", inp, predict_sig.outputs, feature_names=features))
        self._is_classifier = hasattr(estimator, "predict_proba") and hasattr(estimator, "classes_")
        if self._is_classifier:
            classes = tuple(str(c) for c in estimator.classes_)
            probs = (TensorSpec("probabilities", "FP64", (-1, len(classes))),)
            sigs.setdefault("predict_proba", Signature("predict_proba", inp, probs, feature_names=features))
            sigs.setdefault(
                "classify",
                Signature(
                    "classify",
                    inp,
                    probs,
                    CLASSIFY_METHOD,
                    class_labels=manifest.class_labels or classes,
                    feature_names=features,
                ),
            )
        elif probe.dtype.kind == "f":
            sigs.setdefault(
                "regress",
                Signature(
                    "regress", inp, (TensorSpec("predictions", "FP64", (-1,)),), REGRESS_METHOD, feature_names=features
                ),
            )
        # Most estimators raise on NaN/Infinity; imputing pipelines, HistGradientBoosting, LightGBM and XGBoost
        # take NaN as "missing". Ask the model itself, once, so such requests are refused as invalid input
        # (400) before they reach it rather than reported as a model failure.
        allows_nan, allows_inf = _accepts(estimator, self._n, np.nan), _accepts(estimator, self._n, np.inf)
        self._signatures = {
            name: dataclasses.replace(sig, allows_nan=allows_nan, allows_inf=allows_inf) for name, sig in sigs.items()
        }

    @property
    def signatures(self) -> Mapping[str, Signature]:
        return self._signatures

    def predict(self, signature: str, inputs: TensorMap) -> dict[str, npt.NDArray[Any]]:
        sig = self._signatures[signature]
        x = inputs[sig.inputs[0].name]
        out_name = sig.outputs[0].name
        if out_name == "probabilities":
            return {out_name: np.asarray(self._est.predict_proba(x), dtype=np.float64)}
        y = np.asarray(self._est.predict(x))
        if sig.method == REGRESS_METHOD:
            y = y.astype(np.float64).reshape(-1)
        return {out_name: y}

    def unload(self) -> None:
        self._est = None


def _accepts(estimator: Any, n_features: int, value: float) -> bool:
    """Whether ``estimator.predict`` runs on a row of ``value`` (NaN or Infinity) without raising."""
    row = np.full((1, n_features), value, dtype=np.float64)
    try:
        with np.errstate(all="ignore"):
            estimator.predict(row)
    except Exception:
        return False
    return True


class SklearnRuntime:
    name = "sklearn"

    def can_load(self, path: Path) -> bool:
        return find_one(path, SUFFIXES) is not None

    def load(self, path: Path, manifest: Manifest, options: RuntimeOptions) -> Servable:
        import joblib

        model_file = find_one(path, SUFFIXES)
        if model_file is None:
            raise ConfigError(f"no {'/'.join(SUFFIXES)} file in {path}")
        try:
            estimator = joblib.load(model_file)
        except Exception as exc:  # unpickling raises anything: EOFError, UnpicklingError, KeyError...
            raise ConfigError(f"cannot load {model_file.name}: {type(exc).__name__}: {exc}") from exc
        if not hasattr(estimator, "predict"):
            raise ConfigError(f"{model_file.name} holds a {type(estimator).__name__}, which has no predict()")
        return SklearnServable(estimator, manifest)
