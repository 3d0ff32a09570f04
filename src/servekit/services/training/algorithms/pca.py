"""SageMaker's first-party PCA (the ``pca`` image; the SDK's ``PCA`` estimator), trained and served here.

Training reads the ``train`` channel (RecordIO-protobuf, the SDK's ``RecordSet``, or CSV of features), checks the
hyperparameters the algorithm takes (``feature_dim``, ``mini_batch_size`` and ``num_components`` required), and finds
the ``num_components`` principal components: ``algorithm_mode`` ``regular`` takes the top eigenvectors of the
covariance matrix (``Σ xᵢᵀxᵢ - (1/n)(Σ xᵢ)ᵀ(Σ xᵢ)``, the mean's part left out when ``subtract_mean`` is false), as
AWS's regular mode does; ``randomized`` sketches the data with ``num_components + extra_components`` random
directions (``extra_components`` -1: max(10, ``num_components``)) and takes the sketch's top singular vectors (Halko
et al.'s randomized SVD, two power iterations). PCA reports no metric (AWS's has none to tune on).

Where it differs from AWS's: AWS streams ``mini_batch_size`` rows at a time and sums its workers' summaries; servekit
fits the whole channel in memory, seeded, so a job run twice gives the same components. The components' signs are
fixed (each one's largest loading positive); AWS leaves them as its solver gives them. The model (``model_algo-1``)
is servekit's: the components, singular values and mean as a NumPy archive (AWS's is an MXNet parameter file with
the same three, ``v``, ``s`` and ``mean``). As in AWS's model, the components are in ascending order of variance:
the last value of a projection is the top component's.

Serving (:func:`project`): each row (less the mean when ``subtract_mean``) times the components, ``projection``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from servekit.services.training.algorithms import first_party as fp

MODEL_FILE = "model_algo-1"
POWER_ITERATIONS = 2  # the randomized mode's power iterations (sharper spectra for the same sketch)
HYPERPARAMETERS = {
    "feature_dim": fp.Param(fp.integer(1), required=True),
    "mini_batch_size": fp.Param(fp.integer(1), required=True),
    "num_components": fp.Param(fp.integer(1), required=True),
    "algorithm_mode": fp.Param(fp.one_of("regular", "randomized"), "regular"),
    "subtract_mean": fp.Param(fp.boolean, True),
    "extra_components": fp.Param(lambda t: _extra(t), -1),
}


def _extra(text: str) -> int:
    value = int(float(text))
    if value < -1:
        raise ValueError("a non-negative integer or -1")
    return value


@dataclass(frozen=True)
class Model:
    """``v``: the components (feature_dim x num_components, ascending variance), ``s``: their singular values,
    ``mean``: the training rows' mean (zeros when ``subtract_mean`` is false)."""

    v: npt.NDArray[np.float64]
    s: npt.NDArray[np.float64]
    mean: npt.NDArray[np.float64]


def _signed(v: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Each column with its largest-magnitude loading positive (a deterministic sign)."""
    biggest = v[np.abs(v).argmax(0), np.arange(v.shape[1])]
    return np.asarray(v * np.where(biggest < 0, -1.0, 1.0))


def fit(x: npt.NDArray[np.float64], hp: dict[str, Any], seed: int = 0) -> Model:
    k = int(hp["num_components"])
    if k > x.shape[1]:
        raise fp.AlgorithmError(f"num_components is {k} but the records have {x.shape[1]} features")
    mean = x.mean(0) if hp["subtract_mean"] else np.zeros(x.shape[1])
    if hp["algorithm_mode"] == "regular":
        centered_gram = x.T @ x - len(x) * np.outer(mean, mean)
        eigenvalues, vectors = np.linalg.eigh((centered_gram + centered_gram.T) / 2)  # ascending, as AWS's are
        v, s = vectors[:, -k:], np.sqrt(np.maximum(eigenvalues[-k:], 0.0))
    else:
        extra = int(hp["extra_components"])
        sketch = min(k + (max(10, k) if extra == -1 else extra), *x.shape)
        v, s = _randomized(x - mean, k, sketch, np.random.default_rng(seed))
    return Model(v=_signed(v), s=s, mean=mean)


def _randomized(
    a: npt.NDArray[np.float64], k: int, sketch: int, rng: np.random.Generator
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """The top ``k`` right singular vectors of ``a`` from a ``sketch``-wide random range (ascending order); when
    ``k`` passes the sketch (more components than rows), the rest are zero-variance directions."""
    q, _ = np.linalg.qr(a @ rng.standard_normal((a.shape[1], sketch)))
    for _ in range(POWER_ITERATIONS):
        q, _ = np.linalg.qr(a.T @ q)
        q, _ = np.linalg.qr(a @ q)
    _, s, vt = np.linalg.svd(q.T @ a, full_matrices=False)
    v, s = vt.T[:, :k], s[:k]
    if v.shape[1] < k:  # complete the basis: directions the data has no variance along
        basis, _ = np.linalg.qr(np.hstack([v, rng.standard_normal((a.shape[1], k - v.shape[1]))]))
        v, s = np.hstack([v, basis[:, v.shape[1] : k]]), np.concatenate([s, np.zeros(k - len(s))])
    return v[:, ::-1].copy(), s[::-1].copy()


def project(x: npt.NDArray[np.float64], model: Model) -> npt.NDArray[np.float64]:
    """Each row's projection on the components."""
    if x.ndim != 2 or x.shape[1] != model.v.shape[0]:
        raise ValueError(f"each record needs {model.v.shape[0]} features, not {x.shape[-1] if x.size else 0}")
    return np.asarray((x - model.mean) @ model.v)


def save(model: Model, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / MODEL_FILE).open("wb") as f:
        np.savez(f, v=model.v, s=model.s, mean=model.mean)


def load(folder: Path) -> Model:
    with (folder / MODEL_FILE).open("rb") as f, np.load(f, allow_pickle=False) as saved:
        return Model(**{k: np.asarray(saved[k], dtype=np.float64) for k in ("v", "s", "mean")})


def main() -> None:
    hp = fp.hyperparameters(fp.raw_hyperparameters(), HYPERPARAMETERS)
    train = fp.channel("train")
    assert train is not None
    x, _ = train
    fp.check_width(x, hp["feature_dim"], "train")
    model = fit(x, hp)
    explained = float((model.s**2).sum() / max(float(((x - model.mean) ** 2).sum()), 1e-300))
    fp.say(f"#train (algo-1) : {len(x)} records, {len(model.s)} components, explained variance ratio {explained:.6g}")
    test = fp.channel("test", required=False)
    if test is not None:  # AWS scores a test channel in its log only; PCA has no metric to tune on
        rebuilt = project(test[0], model) @ model.v.T + model.mean
        fp.say(f"#test (algo-1) : reconstruction mse {float(((test[0] - rebuilt) ** 2).mean()):.10g}")
    save(model, fp.MODEL_DIR)


if __name__ == "__main__":
    raise SystemExit(fp.run(main))
