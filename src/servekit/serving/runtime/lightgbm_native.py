"""LightGBM models in LightGBM's own text format (``Booster.save_model``: a ``.txt`` file), without joblib.

The model file's header names the objective: ``binary`` and ``multiclass``/``multiclassova`` are classifiers
(LightGBM predicts their probabilities, as ``LGBMClassifier.predict_proba``), everything else answers values.
LightGBM predicts in its C library without the GIL, on ``num_threads`` threads.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from servekit.config.models import RuntimeOptions
from servekit.errors import ConfigError
from servekit.serving.runtime.base import Concurrency, Servable, pool_threads
from servekit.serving.runtime.manifest import Manifest
from servekit.serving.runtime.tabular import BoosterServable

# LightGBM names features Column_<i> when it was given none; those are no feature names to offer clients.
_DEFAULT_FEATURE = re.compile(r"Column_\d+")


def _header(model_file: Path) -> dict[str, str] | None:
    """The ``key=value`` lines before the first tree, or None when the file is no LightGBM model (its first
    line is ``tree``, then ``version=v<n>``)."""
    header: dict[str, str] = {}
    with model_file.open("r", encoding="utf-8", errors="replace") as fh:
        if fh.readline().strip() != "tree":
            return None
        for line in fh:
            line = line.strip()
            if not line or line.startswith("Tree="):
                break
            key, sep, value = line.partition("=")
            if sep:
                header[key] = value
    return header if header.get("version", "").startswith("v") else None


def _model_file(path: Path) -> tuple[Path, dict[str, str]] | None:
    for candidate in sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() == ".txt"):
        header = _header(candidate)
        if header is not None:
            return candidate, header
    return None


class _LGBooster:
    def __init__(self, booster: Any, header: dict[str, str], threads: int) -> None:
        self._b = booster
        self._threads = threads
        objective = header.get("objective", "").split(" ")[0]
        num_class = int(header.get("num_class", "1"))
        self.n_features = int(booster.num_feature())
        names = tuple(str(n) for n in booster.feature_name())
        self.feature_names = () if all(_DEFAULT_FEATURE.fullmatch(n) for n in names) else names
        if objective == "binary":
            self.n_classes = 2
        elif objective in ("multiclass", "multiclassova"):
            self.n_classes = num_class
        else:  # regression objectives, lambdarank, cross_entropy (a value in [0, 1], not a class)
            self.n_classes = 0

    def values(self, x: npt.NDArray[np.float64]) -> npt.NDArray[Any]:
        return np.asarray(self._b.predict(x, num_threads=self._threads))

    def release(self) -> None:
        self._b = None


class LightGBMRuntime:
    name = "lightgbm"

    def can_load(self, path: Path) -> bool:
        return _model_file(path) is not None

    def load(self, path: Path, manifest: Manifest, options: RuntimeOptions) -> Servable:
        found = _model_file(path)
        if found is None:
            raise ConfigError(f"no LightGBM model (a .txt file written by Booster.save_model) in {path}")
        model_file, header = found
        try:
            import lightgbm
        except ImportError:
            raise ConfigError(
                "this version holds a LightGBM model, but lightgbm is not installed: pip install 'servekit[lightgbm]'"
            ) from None
        try:
            booster = lightgbm.Booster(model_file=str(model_file))
        except lightgbm.basic.LightGBMError as exc:
            raise ConfigError(f"cannot load {model_file.name}: {exc}") from exc
        threads = pool_threads(options.intra_op_threads)
        native = _LGBooster(booster, header, threads)
        return BoosterServable(native, manifest, "lightgbm", Concurrency(releases_gil=True, threads=threads))
