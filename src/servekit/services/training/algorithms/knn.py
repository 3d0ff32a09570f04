"""SageMaker's first-party k-NN (the ``knn`` image; the SDK's ``KNN`` estimator), trained and served here.

Training reads the ``train`` channel's rows and labels (RecordIO-protobuf, the SDK's ``RecordSet`` with
``label["values"]``; or CSV, the label in the first column, as AWS's supervised algorithms read it), checks the
hyperparameters as AWS does (``k``, ``sample_size``, ``predictor_type`` and ``feature_dim`` required;
``dimension_reduction_type`` ``sign`` or ``fjlt`` with a ``dimension_reduction_target`` below ``feature_dim``;
``index_type``, ``index_metric``, ``faiss_index_ivf_nlists``, ``faiss_index_pq_m`` of the values AWS takes, IVFPQ
only with L2) and keeps a uniform sample of ``sample_size`` rows (all of them when the channel has fewer), reduced to
``dimension_reduction_target`` dimensions by a random projection when asked (``sign``: random ±1 entries; ``fjlt``:
a subsampled randomized Hadamard transform), with their labels. A ``test`` channel is scored: ``test:accuracy``
(``classifier``) or ``test:mse`` (``regressor``), the tuner's objectives.

Serving (:func:`predict`): each row's ``k`` nearest sampled rows under ``index_metric`` (``L2``: Euclidean
distance, smallest first; ``INNER_PRODUCT`` and ``COSINE``: the similarity, largest first), and its
``predicted_label``: the most frequent of their labels (``classifier``; a tie goes to the label of the nearest row
among the tied ones) or their mean (``regressor``).

Where it differs from AWS's: every ``index_type`` is answered by an exact search over the sample (AWS builds a FAISS
index; IVFFlat and IVFPQ are approximate there, so AWS's neighbours can differ where servekit's are exact), and
``faiss_index_ivf_nlists`` and ``faiss_index_pq_m`` are checked without effect. The sample and the projections are
drawn from a seeded generator of servekit's own, so they are not AWS's rows. The model (``model_algo-1``) is
servekit's: the sample, its labels and the projection as NumPy arrays (AWS's is a FAISS index).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from servekit.services.training.algorithms import first_party as fp

MODEL_FILE = "model_algo-1"
PQ_M = ("1", "2", "3", "4", "8", "12", "16", "20", "24", "28", "32", "40", "48", "56", "64", "96")


def _nlists(text: str) -> str:
    if text != "auto":
        fp.integer(1)(text)
    return text


HYPERPARAMETERS = {
    "k": fp.Param(fp.integer(1), required=True),
    "sample_size": fp.Param(fp.integer(1), required=True),
    "predictor_type": fp.Param(fp.one_of("classifier", "regressor"), required=True),
    "feature_dim": fp.Param(fp.integer(1), required=True),
    "dimension_reduction_type": fp.Param(fp.one_of("sign", "fjlt"), None),
    "dimension_reduction_target": fp.Param(fp.integer(1), None),
    "index_type": fp.Param(fp.one_of("faiss.Flat", "faiss.IVFFlat", "faiss.IVFPQ"), "faiss.Flat"),
    "index_metric": fp.Param(fp.one_of("L2", "INNER_PRODUCT", "COSINE"), "L2"),
    "faiss_index_ivf_nlists": fp.Param(_nlists, "auto"),
    "faiss_index_pq_m": fp.Param(lambda t: int(fp.one_of(*PQ_M)(t)), None),
    "mini_batch_size": fp.Param(fp.integer(1), 5000),
}


def check(hp: dict[str, Any]) -> dict[str, Any]:
    """The rules AWS checks across hyperparameters."""
    target, kind = hp["dimension_reduction_target"], hp["dimension_reduction_type"]
    if kind is not None and target is None:
        raise fp.AlgorithmError("dimension_reduction_target is required when dimension_reduction_type is set")
    if kind is not None and not target < hp["feature_dim"]:
        raise fp.AlgorithmError(
            f"dimension_reduction_target ({target}) must be less than feature_dim ({hp['feature_dim']})"
        )
    if hp["index_type"] == "faiss.IVFPQ" and hp["index_metric"] != "L2":
        raise fp.AlgorithmError(f"index_metric {hp['index_metric']} is not supported with index_type faiss.IVFPQ")
    return hp


@dataclass(frozen=True)
class Model:
    """The sampled rows (projected when a projection is kept), their labels, and how to search them."""

    sample: npt.NDArray[np.float64]
    labels: npt.NDArray[np.float64]
    projection: npt.NDArray[np.float64] | None
    k: int
    predictor_type: str
    metric: str

    @property
    def feature_dim(self) -> int:
        return int(self.projection.shape[0] if self.projection is not None else self.sample.shape[1])


def _parity(a: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Each entry's number of set bits, mod 2 (np.bitwise_count is NumPy 2's only)."""
    out = np.zeros_like(a)
    while a.any():
        out ^= a & 1
        a = a >> 1
    return out


def projection(kind: str, d: int, target: int, rng: np.random.Generator) -> npt.NDArray[np.float64]:
    """A ``d`` x ``target`` random projection that keeps distances in expectation (Johnson-Lindenstrauss):
    ``sign``, independent ±1/√target entries; ``fjlt``, random signs, a Walsh-Hadamard transform of the rows padded
    to a power of two, and ``target`` of its columns, scaled (the subsampled randomized Hadamard transform)."""
    if kind == "sign":
        return np.asarray(rng.choice([-1.0, 1.0], size=(d, target)) / np.sqrt(target), dtype=np.float64)
    padded = 1 << max(d - 1, 0).bit_length()
    columns = rng.choice(padded, size=target, replace=False)
    hadamard = 1 - 2 * _parity(np.arange(d, dtype=np.int64)[:, None] & columns[None, :].astype(np.int64))
    signs = rng.choice([-1.0, 1.0], size=d)
    return np.asarray(signs[:, None] * hadamard / np.sqrt(target), dtype=np.float64)


def fit(x: npt.NDArray[np.float64], y: npt.NDArray[np.float64], hp: dict[str, Any], seed: int = 0) -> Model:
    """The model: ``sample_size`` rows of ``x`` drawn uniformly (in their order), projected when asked."""
    rng = np.random.default_rng(seed)
    keep = np.sort(rng.choice(len(x), size=min(int(hp["sample_size"]), len(x)), replace=False))
    sample, labels = x[keep], y[keep]
    matrix = None
    if hp["dimension_reduction_type"] is not None:
        matrix = projection(str(hp["dimension_reduction_type"]), x.shape[1], int(hp["dimension_reduction_target"]), rng)
        sample = sample @ matrix
    return Model(sample, labels, matrix, int(hp["k"]), str(hp["predictor_type"]), str(hp["index_metric"]))


def neighbours(x: npt.NDArray[np.float64], model: Model) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Each row's nearest sampled rows, nearest first: their labels and distances (L2) or similarities."""
    if x.ndim != 2 or x.shape[1] != model.feature_dim:
        raise ValueError(f"each record needs {model.feature_dim} features, not {x.shape[-1] if x.size else 0}")
    q = x @ model.projection if model.projection is not None else x
    s = model.sample
    k = min(model.k, len(s))
    if model.metric == "L2":
        d = np.sqrt(np.maximum((q * q).sum(1)[:, None] - 2 * q @ s.T + (s * s).sum(1)[None, :], 0.0))
        order = np.argsort(d, axis=1, kind="stable")[:, :k]
    else:
        if model.metric == "COSINE":
            q = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-300)
            s = s / np.maximum(np.linalg.norm(s, axis=1, keepdims=True), 1e-300)
        d = q @ s.T
        order = np.argsort(-d, axis=1, kind="stable")[:, :k]
    return model.labels[order], np.take_along_axis(d, order, axis=1)


def vote(labels: npt.NDArray[np.float64], predictor_type: str) -> npt.NDArray[np.float64]:
    """Each row's prediction from its neighbours' labels (nearest first)."""
    if predictor_type == "regressor":
        return np.asarray(labels.mean(1))
    out = np.empty(len(labels))
    for i, row in enumerate(labels):
        values, first, counts = np.unique(row, return_index=True, return_counts=True)
        tied = counts == counts.max()
        out[i] = values[tied][np.argmin(first[tied])]
    return out


def predict(
    x: npt.NDArray[np.float64], model: Model
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Each row's predicted label, and its neighbours' labels and distances."""
    labels, distances = neighbours(x, model)
    return vote(labels, model.predictor_type), labels, distances


def score(model: Model, x: npt.NDArray[np.float64], y: npt.NDArray[np.float64]) -> dict[str, float]:
    predicted = predict(x, model)[0]
    if model.predictor_type == "classifier":
        return {"accuracy": float(np.mean(predicted == y))}
    return {"mse": float(np.mean((predicted - y) ** 2))}


def save(model: Model, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    meta = json.dumps({"k": model.k, "predictor_type": model.predictor_type, "metric": model.metric})
    arrays = {"sample": model.sample, "labels": model.labels, "meta": np.asarray(meta)}
    if model.projection is not None:
        arrays["projection"] = model.projection
    np.savez(buffer, **arrays)  # type: ignore[arg-type]  # numpy's stub reads ** as its allow_pickle
    (folder / MODEL_FILE).write_bytes(buffer.getvalue())


def load(folder: Path) -> Model:
    with np.load(io.BytesIO((folder / MODEL_FILE).read_bytes()), allow_pickle=False) as a:
        meta = json.loads(str(a["meta"]))
        matrix = np.asarray(a["projection"], dtype=np.float64) if "projection" in a.files else None
        return Model(
            np.asarray(a["sample"], dtype=np.float64),
            np.asarray(a["labels"], dtype=np.float64),
            matrix,
            int(meta["k"]),
            str(meta["predictor_type"]),
            str(meta["metric"]),
        )


def _labelled(name: str, hp: dict[str, Any], required: bool = True) -> tuple[Any, Any] | None:
    """A channel's rows and labels; CSV's label is its first column."""
    found = fp.channel(name, required)
    if found is None:
        return None
    x, y = found
    config = json.loads((fp.CONFIG / "inputdataconfig.json").read_text())
    kind = str(config[name].get("ContentType") or "").split(";")[0].strip().lower()
    if kind in fp.CSV:
        x, y = x[:, 1:], x[:, 0]
    if y is None:
        raise fp.AlgorithmError(f"The {name} channel's records have no labels (label['values']); k-NN needs them")
    fp.check_width(x, hp["feature_dim"], name)
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise fp.AlgorithmError(f"The {name} channel holds NaN or infinite values")
    return x, y


def main() -> None:
    hp = check(fp.hyperparameters(fp.raw_hyperparameters(), HYPERPARAMETERS))
    train = _labelled("train", hp)
    assert train is not None
    model = fit(train[0], train[1], hp)
    fp.say(f"servekit k-NN: kept {len(model.sample)} of {len(train[0])} rows, {model.sample.shape[1]} dimensions")
    test = _labelled("test", hp, required=False)
    if test is not None:
        fp.report("test", score(model, *test))
    save(model, fp.MODEL_DIR)


if __name__ == "__main__":
    raise SystemExit(fp.run(main))
