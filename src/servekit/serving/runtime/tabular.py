"""Signatures of a native gradient-boosting model (XGBoost, LightGBM), named as the sklearn runtime names them.

A model saved in its framework's own format has no scikit-learn estimator around it, but a client should not
be able to tell: the same ``inputs`` tensor, ``predictions`` / ``probabilities`` outputs and the
``serving_default``, ``predict``, ``predict_proba``, ``classify`` and ``regress`` signatures as
:mod:`servekit.serving.runtime.sklearn` gives the same model saved with joblib. The format modules say only how to
run their booster (:class:`Booster`); this module owns the contract.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from servekit.errors import ConfigError
from servekit.serving.runtime.base import Concurrency
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

# The sklearn runtime's tensor names (servekit.serving.runtime.sklearn), kept identical on purpose.
INPUT = "inputs"
PREDICTIONS = "predictions"
PROBABILITIES = "probabilities"


class Booster(Protocol):
    """What a native booster format offers this module."""

    n_features: int
    feature_names: tuple[str, ...]
    # Number of classes for a classification objective, 0 for anything else (regression, ranking, ...).
    n_classes: int

    def values(self, x: npt.NDArray[np.float64]) -> npt.NDArray[Any]:
        """The model's raw prediction: the regression value, or class probabilities for a classifier."""
        ...

    def release(self) -> None: ...


def probabilities(values: npt.NDArray[Any], n_classes: int) -> npt.NDArray[np.float64]:
    """``[n, k]`` class probabilities from a classifier's prediction, as the sklearn wrappers' predict_proba:
    a binary model predicts P(class 1) per row, a multi-class one a row of k probabilities."""
    v = np.asarray(values, dtype=np.float64)
    if n_classes == 2 and v.ndim == 1:
        return np.column_stack((1.0 - v, v))
    return v.reshape(v.shape[0], n_classes)


class BoosterServable:
    """A native booster behind the sklearn runtime's signatures."""

    def __init__(self, booster: Booster, manifest: Manifest, platform: str, concurrency: Concurrency) -> None:
        self.platform = platform
        self.concurrency = concurrency
        self.device = "cpu"  # where the booster predicts; the XGBoost runtime sets "cuda:N" for a GPU
        self._booster: Booster | None = booster
        self._k = booster.n_classes
        n = booster.n_features
        features = manifest.feature_names or booster.feature_names
        inp = (TensorSpec(INPUT, "FP64", (-1, n)),)
        # A probe row at load time tells the output dtype and checks that the model runs at all (as sklearn's).
        probe = np.asarray(booster.values(np.zeros((1, n), dtype=np.float64)))
        if self._k:
            preds = (TensorSpec(PREDICTIONS, "INT64", (-1,)),)
        else:
            preds = (TensorSpec(PREDICTIONS, v2_datatype(probe.dtype), (-1, *probe.shape[1:])),)
        sigs: dict[str, Signature] = {s.name: s for s in manifest.signatures}
        sigs.setdefault(DEFAULT_SIGNATURE, Signature(DEFAULT_SIGNATURE, inp, preds, feature_names=features))
        sigs.setdefault("predict", Signature("predict", inp, preds, feature_names=features))
        if self._k:
            labels = manifest.class_labels or tuple(str(i) for i in range(self._k))
            if len(labels) != self._k:
                raise ConfigError(f"class_labels names {len(labels)} classes; the model has {self._k}")
            probs = (TensorSpec(PROBABILITIES, "FP64", (-1, self._k)),)
            sigs.setdefault("predict_proba", Signature("predict_proba", inp, probs, feature_names=features))
            sigs.setdefault(
                "classify",
                Signature("classify", inp, probs, CLASSIFY_METHOD, class_labels=labels, feature_names=features),
            )
        elif probe.dtype.kind == "f" and probe.ndim == 1:
            regress_out = (TensorSpec(PREDICTIONS, "FP64", (-1,)),)
            sigs.setdefault("regress", Signature("regress", inp, regress_out, REGRESS_METHOD, feature_names=features))
        # Both frameworks take NaN as "missing"; ask the model about Infinity instead of assuming.
        allows_nan, allows_inf = _accepts(booster, n, np.nan), _accepts(booster, n, np.inf)
        self._signatures = {
            name: dataclasses.replace(sig, allows_nan=allows_nan, allows_inf=allows_inf) for name, sig in sigs.items()
        }

    @property
    def signatures(self) -> Mapping[str, Signature]:
        return self._signatures

    def predict(self, signature: str, inputs: TensorMap) -> dict[str, npt.NDArray[Any]]:
        booster = self._booster
        if booster is None:
            raise RuntimeError("the model was unloaded")
        sig = self._signatures[signature]
        x = np.asarray(inputs[sig.inputs[0].name], dtype=np.float64)
        out_name = sig.outputs[0].name
        values = booster.values(x)
        if self._k:
            probs = probabilities(values, self._k)
            if out_name == PROBABILITIES:
                return {out_name: probs}
            return {out_name: np.argmax(probs, axis=1).astype(np.int64)}
        y = np.asarray(values)
        if sig.method == REGRESS_METHOD:
            y = y.astype(np.float64).reshape(-1)
        return {out_name: y}

    def unload(self) -> None:
        if self._booster is not None:
            self._booster.release()
        self._booster = None


def _accepts(booster: Booster, n_features: int, value: float) -> bool:
    """Whether the booster predicts on a row of ``value`` (NaN or Infinity) without raising."""
    try:
        with np.errstate(all="ignore"):
            booster.values(np.full((1, n_features), value, dtype=np.float64))
    except Exception:
        return False
    return True
