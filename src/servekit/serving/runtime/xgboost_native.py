"""XGBoost models in XGBoost's own format (``Booster.save_model``: ``.json`` or ``.ubj``), without joblib.

A model in an older XGBoost's binary format (``xgboost-model``, ``.bin``, ``.model``), or SageMaker's pickled
``xgboost.core.Booster`` holding one, which XGBoost 3 no longer reads, is converted to the JSON format at load
(xgboost_legacy).

The booster's objective says what it is: ``binary:*`` and ``multi:*`` objectives are classifiers (their
probabilities computed as ``XGBClassifier.predict_proba`` does), everything else answers values (regression,
ranking, survival). Predictions go through ``inplace_predict``, which runs in XGBoost's C library without the
GIL on ``nthread`` threads.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from servekit.config.models import RuntimeOptions
from servekit.errors import ConfigError
from servekit.serving.runtime import devices
from servekit.serving.runtime.base import Concurrency, Servable, pool_threads
from servekit.serving.runtime.manifest import Manifest
from servekit.serving.runtime.tabular import BoosterServable
from servekit.serving.runtime.xgboost_legacy import convert, looks_legacy, looks_pickled

log = logging.getLogger(__name__)

SUFFIXES = (".json", ".ubj")
# Classification objectives whose prediction is a probability (value) or a margin to squash (margin).
_PROBABILITY_OBJECTIVES = ("binary:logistic", "multi:softprob")
_MARGIN_OBJECTIVES = ("binary:logitraw", "multi:softmax")


SAGEMAKER_NAME = "xgboost-model"  # what SageMaker's XGBoost algorithm (and servekit's training of it) writes
LEGACY_SUFFIXES = (".bin", ".model")  # what older XGBoost's binary models were usually called
_HEAD = 512  # enough of a file to tell the formats apart


def _xgboost_head(head: bytes) -> bool:
    """Whether a file starts as XGBoost's JSON or UBJSON model does."""
    return head.startswith(b'{"learner"') or (head.startswith(b"{L") and b"learner" in head)


def _legacy_head(head: bytes) -> bool:
    """Whether a file starts as an older XGBoost's binary model or a pickled booster does (converted at load)."""
    return looks_legacy(head) or looks_pickled(head)


def _model_file(path: Path) -> tuple[Path, bool] | None:
    """The XGBoost model in ``path`` and whether it is in a legacy format: a ``.ubj``/``.json`` file, or
    SageMaker's ``xgboost-model``, that starts as XGBoost writes one (a version directory may hold other JSON files,
    which must not make it look like an XGBoost model); else an ``xgboost-model``/``.bin``/``.model`` file that
    starts as an older XGBoost's binary model or a pickled booster."""
    files = sorted(p for p in path.iterdir() if p.is_file())
    heads: dict[Path, bytes] = {}
    for candidate in files:
        if candidate.suffix.lower() in SUFFIXES + LEGACY_SUFFIXES or candidate.name == SAGEMAKER_NAME:
            with candidate.open("rb") as fh:
                heads[candidate] = fh.read(_HEAD)
    for candidate, head in heads.items():
        if candidate.suffix.lower() not in LEGACY_SUFFIXES and _xgboost_head(head):
            return candidate, False
    for candidate, head in heads.items():
        if candidate.suffix.lower() not in SUFFIXES and _legacy_head(head):
            return candidate, True
    return None


def unreadable_sagemaker_model(path: Path) -> str | None:
    """Why a version's ``xgboost-model`` is no model servekit reads (neither XGBoost's JSON/UBJSON format nor an
    older XGBoost's binary model or pickled booster that servekit converts), or None."""
    candidate = path / SAGEMAKER_NAME
    if not candidate.is_file():
        return None
    with candidate.open("rb") as fh:
        head = fh.read(_HEAD)
    if _xgboost_head(head) or _legacy_head(head):
        return None
    return (
        f"{candidate} is not in XGBoost's JSON or UBJSON model format (it is an older XGBoost's binary model or a "
        "pickled booster, which XGBoost 2 and later cannot read): load it with the XGBoost that wrote it and save it "
        "again with Booster.save_model('xgboost-model.json')"
    )


def _import_xgboost() -> Any:
    try:
        import xgboost
    except ImportError:
        raise ConfigError(
            "this version holds an XGBoost model, but xgboost is not installed: pip install 'servekit[xgboost]'"
        ) from None
    return xgboost


class _XGBooster:
    def __init__(self, booster: Any, threads: int) -> None:
        self._b = booster
        booster.set_param({"nthread": threads})
        config = json.loads(booster.save_config())["learner"]
        self.objective = str(config["objective"]["name"])
        self.n_features = int(booster.num_features())
        self.feature_names = tuple(booster.feature_names or ())
        if self.objective.startswith("multi:"):
            self.n_classes = int(config["learner_model_param"]["num_class"])
        elif self.objective in ("binary:logistic", "binary:logitraw"):
            self.n_classes = 2
        else:  # regression, ranking, survival, binary:hinge (labels without probabilities)
            self.n_classes = 0

    def values(self, x: npt.NDArray[np.float64]) -> npt.NDArray[Any]:
        if self.objective in _MARGIN_OBJECTIVES:
            margin = np.asarray(self._b.inplace_predict(x, predict_type="margin"), dtype=np.float64)
            if self.n_classes == 2:
                return np.asarray(1.0 / (1.0 + np.exp(-margin)))
            shifted = np.exp(margin - margin.max(axis=1, keepdims=True))
            return np.asarray(shifted / shifted.sum(axis=1, keepdims=True))
        return np.asarray(self._b.inplace_predict(x))

    def release(self) -> None:
        self._b = None


class XGBoostRuntime:
    name = "xgboost"

    def can_load(self, path: Path) -> bool:
        return _model_file(path) is not None

    def load(self, path: Path, manifest: Manifest, options: RuntimeOptions) -> Servable:
        found = _model_file(path)
        if found is None:
            raise ConfigError(f"no XGBoost model (.json or .ubj written by Booster.save_model) in {path}")
        model_file, legacy = found
        xgboost = _import_xgboost()
        data = model_file.read_bytes()
        if legacy:
            try:
                data = convert(data)
            except ValueError as exc:
                raise ConfigError(
                    f"{model_file} looks like an older XGBoost's binary model or a pickled booster, but servekit "
                    f"cannot convert it ({exc}): load it with the XGBoost that wrote it and save it again with "
                    "Booster.save_model('xgboost-model.json')"
                ) from exc
            log.info("%s: converted an older XGBoost's binary model (or pickled booster) to JSON at load", model_file)
        try:
            # from its bytes: XGBoost tells JSON from UBJSON by content (SageMaker's xgboost-model has no suffix)
            booster = xgboost.Booster(model_file=bytearray(data))
        except xgboost.core.XGBoostError as exc:
            raise ConfigError(f"cannot load {model_file.name}: {exc}") from exc
        threads = pool_threads(options.intra_op_threads)
        placement = place(xgboost, options)
        if placement.gpu_index is not None:
            booster.set_param(devices.xgboost_params(placement))
        native = _XGBooster(booster, threads)
        devices.log_placement(path, "XGBoost", placement)
        servable = BoosterServable(native, manifest, "xgboost", Concurrency(releases_gil=True, threads=threads))
        servable.device = placement.device
        return servable


def place(xgboost: Any, options: RuntimeOptions) -> devices.Placement:
    """XGBoost predicts on a GPU when it is built with CUDA (``build_info()["USE_CUDA"]``) and a card is
    visible. XGBoost bounds no memory of its own, so ``--per_process_gpu_memory_fraction`` does not apply."""
    if options.device.kind == "cpu":
        return devices.Placement(devices.CPU, "--device cpu")
    cuda = bool(xgboost.build_info().get("USE_CUDA", False))
    why = "" if cuda else "XGBoost here is built without CUDA (build_info()['USE_CUDA'] is False)"
    return devices.choose(options.device, "XGBoost", len(devices.machine_gpus()), cuda, why)
