"""SageMaker's first-party k-means (the ``kmeans`` image; the SDK's ``KMeans`` estimator), trained and served here.

Training reads the ``train`` channel (RecordIO-protobuf, the SDK's ``RecordSet``, or CSV of features), checks the
hyperparameters the algorithm takes (``k`` and ``feature_dim`` required), and runs Lloyd's algorithm from ``k``
starting centers (``init_method``, ``random`` rows or ``kmeans++``, picks ``extra_center_factor`` times more
candidates; ``local_lloyd_init_method`` reduces them to ``k``), ``local_lloyd_num_trials`` times, keeping the centers
of least within-cluster squared distance, until the centers move less than ``local_lloyd_tol`` or after
``local_lloyd_max_iter`` rounds. A ``test`` channel is scored with ``eval_metrics``: ``msd`` (mean squared distance to
the closest center) and ``ssd`` (their sum): ``test:msd`` and ``test:ssd``, the tuner's objectives.

Where it differs from AWS's: AWS streams mini-batches over ``epochs`` and reduces ``extra_center_factor`` times more
centers to ``k``; servekit fits the whole channel in memory (the hyperparameters are checked and the streaming
ones have no effect), seeded, so a job run twice gives the same centers. The model (``model_algo-1``) is servekit's:
the centers as a NumPy array (AWS's is an MXNet parameter file).

Serving (:func:`assign`): each row's ``closest_cluster`` and ``distance_to_cluster`` (Euclidean), as AWS answers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from servekit.services.training.algorithms import first_party as fp

MODEL_FILE = "model_algo-1"
AUTO_EXTRA = 10  # extra_center_factor "auto": candidates per center the first pass keeps
HYPERPARAMETERS = {
    "k": fp.Param(fp.integer(1), required=True),
    "feature_dim": fp.Param(fp.integer(1), required=True),
    "mini_batch_size": fp.Param(fp.integer(1), 5000),
    "epochs": fp.Param(fp.integer(1), 1),
    "init_method": fp.Param(fp.one_of("random", "kmeans++"), "random"),
    "local_lloyd_init_method": fp.Param(fp.one_of("random", "kmeans++"), "kmeans++"),
    "local_lloyd_max_iter": fp.Param(fp.integer(1), 300),
    "local_lloyd_num_trials": fp.Param(lambda t: 1 if t == "auto" else fp.integer(1)(t), 1),
    "local_lloyd_tol": fp.Param(fp.real(0.0, 1.0), 0.0001),
    "half_life_time_size": fp.Param(fp.integer(0), 0),
    "extra_center_factor": fp.Param(lambda t: AUTO_EXTRA if t == "auto" else fp.integer(1)(t), AUTO_EXTRA),
    "eval_metrics": fp.Param(lambda t: _metrics(t), ["msd"]),
    "force_dense": fp.Param(fp.boolean, True),
}


def _metrics(text: str) -> list[str]:
    try:
        names = json.loads(text) if text.startswith("[") else [n.strip() for n in text.split(",")]
    except ValueError:
        raise ValueError('a list of "msd" and "ssd"') from None
    if not names or any(n not in ("msd", "ssd") for n in names):
        raise ValueError('a list of "msd" and "ssd"')
    return [str(n) for n in names]


def _squared(x: npt.NDArray[np.float64], centers: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Each row's squared Euclidean distance to each center."""
    d = (x * x).sum(1)[:, None] - 2 * x @ centers.T + (centers * centers).sum(1)[None, :]
    return np.asarray(np.maximum(d, 0.0))


def _start(x: npt.NDArray[np.float64], hp: dict[str, Any], rng: np.random.Generator) -> npt.NDArray[np.float64]:
    """The k starting centers, as AWS's algorithm makes them: ``init_method`` picks ``extra_center_factor`` times
    more candidates than ``k`` from the data, ``local_lloyd_init_method`` reduces them to ``k``."""
    k = int(hp["k"])
    candidates = _init(x, min(len(x), k * int(hp["extra_center_factor"])), str(hp["init_method"]), rng)
    return _init(candidates, k, str(hp["local_lloyd_init_method"]), rng)


def _init(x: npt.NDArray[np.float64], k: int, how: str, rng: np.random.Generator) -> npt.NDArray[np.float64]:
    if how == "random" or len(x) <= k:
        return x[rng.choice(len(x), size=k, replace=len(x) < k)].copy()
    centers = [x[rng.integers(len(x))]]
    closest = _squared(x, np.asarray(centers))[:, 0]
    for _ in range(1, k):  # k-means++: each next center drawn in proportion to its squared distance
        total = closest.sum()
        pick = rng.choice(len(x), p=closest / total) if total > 0 else rng.integers(len(x))
        centers.append(x[pick])
        closest = np.minimum(closest, _squared(x, x[pick : pick + 1])[:, 0])
    return np.asarray(centers)


def fit(x: npt.NDArray[np.float64], hp: dict[str, Any], seed: int = 0) -> npt.NDArray[np.float64]:
    """The k centers (Lloyd's algorithm, the best of ``local_lloyd_num_trials`` starts)."""
    rng = np.random.default_rng(seed)
    best, best_cost = None, np.inf
    for _ in range(int(hp["local_lloyd_num_trials"])):
        centers = _start(x, hp, rng)
        for _ in range(int(hp["local_lloyd_max_iter"])):
            nearest = _squared(x, centers).argmin(1)
            moved = centers.copy()
            for j in range(len(centers)):
                members = x[nearest == j]
                if len(members):
                    moved[j] = members.mean(0)
            shift = float(np.abs(moved - centers).max())
            centers = moved
            if shift <= float(hp["local_lloyd_tol"]):
                break
        cost = float(_squared(x, centers).min(1).sum())
        if cost < best_cost:
            best, best_cost = centers, cost
    assert best is not None
    return best


def assign(x: npt.NDArray[np.float64], centers: npt.NDArray[np.float64]) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
    """Each row's closest center and its Euclidean distance to it."""
    if x.ndim != 2 or x.shape[1] != centers.shape[1]:
        raise ValueError(f"each record needs {centers.shape[1]} features, not {x.shape[-1] if x.size else 0}")
    d = _squared(x, centers)
    nearest = d.argmin(1)
    return nearest, np.sqrt(d[np.arange(len(x)), nearest])


def save(centers: npt.NDArray[np.float64], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / MODEL_FILE).open("wb") as f:
        np.save(f, centers, allow_pickle=False)


def load(folder: Path) -> npt.NDArray[np.float64]:
    with (folder / MODEL_FILE).open("rb") as f:
        return np.asarray(np.load(f, allow_pickle=False), dtype=np.float64)


def main() -> None:
    hp = fp.hyperparameters(fp.raw_hyperparameters(), HYPERPARAMETERS)
    train = fp.channel("train")
    assert train is not None
    x, _ = train
    fp.check_width(x, hp["feature_dim"], "train")
    if len(x) < hp["k"]:
        raise fp.AlgorithmError(f"k is {hp['k']} but the train channel has {len(x)} records")
    centers = fit(x, hp)
    _, distance = assign(x, centers)
    fp.say(f"#train_score (algo-1) : ('msd', {float(np.mean(distance**2))})")
    test = fp.channel("test", required=False)
    if test is not None:
        squared = assign(test[0], centers)[1] ** 2
        values = {"msd": float(squared.mean()), "ssd": float(squared.sum())}
        fp.report("test", {m: values[m] for m in hp["eval_metrics"]})
    save(centers, fp.MODEL_DIR)


if __name__ == "__main__":
    raise SystemExit(fp.run(main))
