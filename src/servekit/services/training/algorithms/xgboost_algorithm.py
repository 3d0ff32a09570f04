"""SageMaker's built-in XGBoost algorithm (the ``sagemaker-xgboost`` image without a script): hyperparameters from
``/opt/ml/input/config/hyperparameters.json``, the ``train`` (and optional ``validation``) channel as CSV (label in
the first column, no header) or libsvm, evaluation lines as the container prints them (``[3]\\ttrain-rmse:…``),
and the booster saved as ``/opt/ml/model/xgboost-model``. Run inside the sandbox as ``python -m
servekit.services.training.algorithms.xgboost_algorithm``; a bad hyperparameter or file ends the job with its reason in
``/opt/ml/output/failure``."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

CONFIG = Path("/opt/ml/input/config")
DATA = Path("/opt/ml/input/data")
MODEL = Path("/opt/ml/model/xgboost-model")
FAILURE = Path("/opt/ml/output/failure")
INTEGERS = frozenset({"num_round", "max_depth", "early_stopping_rounds", "num_class", "seed", "max_bin", "nthread"})
# servekit's own: not XGBoost parameters
_NOT_PARAMS = frozenset({"num_round", "early_stopping_rounds", "csv_weights", "_kfold"})


class AlgorithmError(Exception):
    pass


def hyperparameters(raw: dict[str, str]) -> tuple[dict[str, Any], int, int | None]:
    """XGBoost parameters, the number of rounds and early stopping rounds from SageMaker's strings."""
    if "num_round" not in raw:
        raise AlgorithmError("Missing required hyperparameter: num_round")
    params: dict[str, Any] = {}
    for name, value in raw.items():
        text = str(value).strip().strip('"')
        if name in INTEGERS:
            try:
                params[name] = int(float(text))
            except ValueError:
                raise AlgorithmError(f"Hyperparameter {name}: {text!r} is not an integer") from None
        else:
            params[name] = text
    rounds = int(params["num_round"])
    if rounds < 1:
        raise AlgorithmError("Hyperparameter num_round must be at least 1")
    stop = params.get("early_stopping_rounds")
    return {k: v for k, v in params.items() if k not in _NOT_PARAMS}, rounds, stop


def _files(channel: Path) -> list[Path]:
    files = sorted(p for p in channel.rglob("*") if p.is_file() and not p.name.startswith("."))
    if not files:
        raise AlgorithmError(f"The {channel.name} channel has no files")
    return files


def load(channel: Path, content_type: str) -> Any:
    import numpy as np
    import xgboost as xgb

    kind = content_type.split(";")[0].strip().lower()
    if kind in ("text/csv", "csv"):
        blocks = []
        for f in _files(channel):
            try:
                rows = np.loadtxt(f, delimiter=",", ndmin=2)
            except ValueError as exc:
                raise AlgorithmError(f"{f.name} is not numeric CSV with the label first: {exc}") from None
            blocks.append(rows)
        data = np.vstack(blocks)
        if data.shape[1] < 2:
            raise AlgorithmError("CSV input needs the label and at least one feature column")
        return xgb.DMatrix(data[:, 1:], label=data[:, 0])
    if kind in ("libsvm", "text/libsvm", "text/x-libsvm", ""):
        matrix, labels = libsvm((f.name, f.read_text()) for f in _files(channel))
        return xgb.DMatrix(matrix, label=labels)
    raise AlgorithmError(f"Content type {content_type} is not supported: use text/csv or libsvm")


def libsvm(texts: Iterable[tuple[str, str]]) -> tuple[Any, Any]:
    """Rows of libsvm text (``<label> <index>:<value> ...``; ``#`` starts a comment), each ``(name, text)``
    named in errors: a sparse matrix of the features and an array of the labels."""
    import numpy as np
    import scipy.sparse  # type: ignore[import-untyped]

    labels: list[float] = []
    rows_i: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    for name, text in texts:
        for line in text.splitlines():
            parts = line.split("#", 1)[0].split()
            if not parts:
                continue
            try:
                labels.append(float(parts[0]))
                for item in parts[1:]:
                    index, value = item.split(":", 1)
                    rows_i.append(len(labels) - 1)
                    cols.append(int(index))
                    vals.append(float(value))
            except ValueError:
                raise AlgorithmError(f"{name}: {line[:80]!r} is not a libsvm line") from None
    matrix = scipy.sparse.csr_matrix((vals, (rows_i, cols)), shape=(len(labels), max(cols, default=0) + 1))
    return matrix, np.array(labels)


def main() -> int:
    import xgboost as xgb

    try:
        raw = json.loads((CONFIG / "hyperparameters.json").read_text())
        channels = json.loads((CONFIG / "inputdataconfig.json").read_text())
        params, rounds, stop = hyperparameters(raw)
        if "train" not in channels:
            raise AlgorithmError("The train channel is required")
        dtrain = load(DATA / "train", channels["train"].get("ContentType", "libsvm"))
        evals = [(dtrain, "train")]
        if "validation" in channels:
            evals.append((load(DATA / "validation", channels["validation"].get("ContentType", "libsvm")), "validation"))
        params.setdefault("nthread", int(os.environ.get("SM_NUM_CPUS", "1")))
        booster = xgb.train(
            params, dtrain, num_boost_round=rounds, evals=evals, early_stopping_rounds=stop, verbose_eval=True
        )
    except (AlgorithmError, xgb.core.XGBoostError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        FAILURE.write_text(f"ClientError: {reason}")
        sys.stderr.write(f"ClientError: {reason}\n")
        return 2
    MODEL.parent.mkdir(parents=True, exist_ok=True)
    booster.save_model(str(MODEL.with_suffix(".ubj")))
    MODEL.with_suffix(".ubj").rename(MODEL)  # SageMaker's name; XGBoost's own UBJSON format inside
    return 0


if __name__ == "__main__":
    sys.exit(main())
