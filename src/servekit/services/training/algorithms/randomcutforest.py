"""SageMaker's first-party Random Cut Forest (the ``randomcutforest`` image; the SDK's ``RandomCutForest``), trained
and served here: a real random cut forest (Guha et al., 2016), in numpy.

Training reads the ``train`` channel (RecordIO-protobuf, the SDK's ``RecordSet``, or CSV: ``text/csv;label_size=0``)
and checks the hyperparameters as SageMaker does (``feature_dim`` in [1, 10000] required, ``num_trees`` in [50, 1000],
``num_samples_per_tree`` in [1, 2048], ``eval_metrics`` a list of ``accuracy`` and ``precision_recall_fscore``). Each
of ``num_trees`` trees takes ``num_samples_per_tree`` rows drawn uniformly without replacement (what AWS's reservoir
sampling gives) and cuts them recursively until each leaf holds one distinct point: a dimension drawn in proportion
to its extent in the node's bounding box, a cut uniform in that extent.

The anomaly score (:func:`score`) is AWS's: in each tree, the query point walks from the root to a leaf; at every
node it would fall outside of, a random cut of the box grown to hold it separates it with probability ``p`` (the
growth of the box's extents over their new sum), which mixes the score as ``p / (depth + 1) + (1 - p) · below``; at
the leaf, ``1 / (depth + 1)`` (a point the tree does not hold) or ``(1 - m / 2M) / (depth + log₂(1 + m))`` (the leaf's
own point, held ``m`` times in a tree of ``M``); the tree's score times ``log₂(1 + M)``, averaged over the trees. It
is positive, about 1 for points like the training data and larger the sooner a point is cut off.

A ``test`` channel with labels (1 anomaly, 0 normal: RecordIO ``label["values"]``, or CSV ``text/csv;label_size=1``
with the label first) is scored with the three-sigma rule AWS documents: a record is an anomaly when its score is
above the mean plus three standard deviations of the training rows' scores. ``accuracy`` gives ``test:accuracy``;
``precision_recall_fscore`` the anomaly class's ``test:precision``, ``test:recall`` and ``test:f1`` (the tuner's
objective).

Where it differs from AWS's: AWS streams the channel and keeps each tree's sample by reservoir sampling; servekit
reads the channel into memory and samples it once, seeded, so a job run twice gives the same forest and scores. The
model (``model_algo-1``) is servekit's: the trees' nodes and the threshold as a NumPy archive (AWS's is its own
serialised forest). The threshold's training scores are those of at most 100,000 of the training rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from servekit.services.training.algorithms import first_party as fp

MODEL_FILE = "model_algo-1"
METRICS = ("accuracy", "precision_recall_fscore")
THRESHOLD_ROWS = 100_000  # the training rows scored for the three-sigma threshold (a sample past this)
CHUNK = 4_000_000  # (row, tree) pairs x features scored at once: bounds the scorer's memory
HYPERPARAMETERS = {
    "feature_dim": fp.Param(fp.integer(1, 10000), required=True),
    "num_samples_per_tree": fp.Param(fp.integer(1, 2048), 256),
    "num_trees": fp.Param(fp.integer(50, 1000), 100),
    "eval_metrics": fp.Param(lambda t: _metrics(t), list(METRICS)),
    "mini_batch_size": fp.Param(fp.integer(1), 1000),  # the SDK sends its fixed 1000; no effect here
}
_INT = np.int64


def _metrics(text: str) -> list[str]:
    try:
        names = json.loads(text) if text.startswith("[") else [n.strip() for n in text.split(",")]
    except ValueError:
        raise ValueError('a list of "accuracy" and "precision_recall_fscore"') from None
    if not isinstance(names, list) or not names or any(n not in METRICS for n in names):
        raise ValueError('a list of "accuracy" and "precision_recall_fscore"')
    return [str(n) for n in names]


@dataclass(frozen=True)
class Forest:
    """The trees' nodes in flat arrays (a tree's nodes together, its root first): ``dim`` the cut's dimension (-1 at a
    leaf), ``cut`` its value (a point goes left when its value is at most the cut), ``left``/``right`` the children's
    indices, ``lo``/``hi`` the bounding box of the node's points (a leaf's point at a leaf), ``mass`` how many points
    it holds, ``depth`` its depth; ``roots`` each tree's root, ``threshold`` the three-sigma anomaly threshold."""

    dim: npt.NDArray[np.int64]
    cut: npt.NDArray[np.float64]
    left: npt.NDArray[np.int64]
    right: npt.NDArray[np.int64]
    lo: npt.NDArray[np.float64]
    hi: npt.NDArray[np.float64]
    mass: npt.NDArray[np.int64]
    depth: npt.NDArray[np.int64]
    roots: npt.NDArray[np.int64]
    threshold: npt.NDArray[np.float64]  # a 0-d array (the archive holds arrays only)


def _grow(sample: npt.NDArray[np.float64], rng: np.random.Generator, offset: int) -> dict[str, npt.NDArray[Any]]:
    """One tree over ``sample``'s rows (its node indices start at ``offset``)."""
    m, d = sample.shape
    cap = 2 * m - 1
    t: dict[str, npt.NDArray[Any]] = {
        "dim": np.full(cap, -1, _INT), "cut": np.zeros(cap), "left": np.full(cap, -1, _INT),
        "right": np.full(cap, -1, _INT), "lo": np.empty((cap, d)), "hi": np.empty((cap, d)),
        "mass": np.zeros(cap, _INT), "depth": np.zeros(cap, _INT),
    }  # fmt: skip
    used = 1
    stack = [(0, np.arange(m), 0)]
    while stack:  # an explicit stack: a degenerate tree is as deep as its sample is large
        node, rows, depth = stack.pop()
        points = sample[rows]
        lo, hi = points.min(0), points.max(0)
        t["lo"][node], t["hi"][node], t["mass"][node], t["depth"][node] = lo, hi, len(rows), depth
        extent = hi - lo
        total = float(extent.sum())
        if len(rows) == 1 or total <= 0:
            continue  # a leaf: one point (or copies of one)
        ends = np.cumsum(extent)
        while True:
            r = rng.random() * total
            j = min(int(np.searchsorted(ends, r, side="right")), d - 1)
            cut = lo[j] + (r - (ends[j] - extent[j]))
            goes_left = points[:, j] <= cut
            if 0 < goes_left.sum() < len(rows):  # always but for rounding at the box's edge
                break
        t["dim"][node], t["cut"][node] = j, cut
        t["left"][node], t["right"][node] = used + offset, used + 1 + offset
        stack.append((used, rows[goes_left], depth + 1))
        stack.append((used + 1, rows[~goes_left], depth + 1))
        used += 2
    return {k: v[:used] for k, v in t.items()}


def fit(x: npt.NDArray[np.float64], hp: dict[str, Any], seed: int = 0) -> Forest:
    """The forest (its threshold from the scores of ``x``'s rows)."""
    rng = np.random.default_rng(seed)
    m = min(int(hp["num_samples_per_tree"]), len(x))
    trees, roots, offset = [], [], 0
    for _ in range(int(hp["num_trees"])):
        tree = _grow(x[rng.choice(len(x), size=m, replace=False)], rng, offset)
        trees.append(tree)
        roots.append(offset)
        offset += len(tree["dim"])
    parts = {k: np.concatenate([t[k] for t in trees]) for k in trees[0]}
    forest = Forest(**parts, roots=np.asarray(roots, _INT), threshold=np.asarray(np.inf))
    rows = x if len(x) <= THRESHOLD_ROWS else x[rng.choice(len(x), size=THRESHOLD_ROWS, replace=False)]
    scores = score(rows, forest)
    return Forest(**{**forest.__dict__, "threshold": np.asarray(scores.mean() + 3 * scores.std())})


def score(x: npt.NDArray[np.float64], forest: Forest) -> npt.NDArray[np.float64]:
    """Each row's anomaly score: the mean over the trees of the tree's score (the module's docstring)."""
    d = forest.lo.shape[1]
    if x.ndim != 2 or x.shape[1] != d:
        raise ValueError(f"each record needs {d} features, not {x.shape[-1] if x.size else 0}")
    trees = len(forest.roots)
    tree_mass = forest.mass[forest.roots].astype(np.float64)
    step = max(1, CHUNK // (trees * d))
    out = np.empty(len(x))
    for start in range(0, len(x), step):
        block = x[start : start + step]
        row = np.repeat(np.arange(len(block)), trees)
        node = np.tile(forest.roots, len(block))
        total, carry = np.zeros(len(row)), np.ones(len(row))
        live = np.arange(len(row))
        while len(live):
            nd, point = node[live], block[row[live]]
            lo, hi, depth = forest.lo[nd], forest.hi[nd], forest.depth[nd].astype(np.float64)
            leaf = forest.dim[nd] < 0
            grown = (np.maximum(hi, point) - np.minimum(lo, point)).sum(1)
            p = np.where(grown > 0, (grown - (hi - lo).sum(1)) / np.where(grown > 0, grown, 1.0), 0.0)
            mass = forest.mass[nd].astype(np.float64)
            seen = np.all(point == lo, axis=1)
            own = (1 - mass / (2 * tree_mass[live % trees])) / (depth + np.log2(1 + mass))
            at_leaf = np.where(seen, own, 1 / (depth + 1))
            total[live] += carry[live] * np.where(leaf, at_leaf, p / (depth + 1))
            carry[live] *= np.where(leaf, 0.0, 1 - p)
            inner = ~leaf
            go_left = point[inner, forest.dim[nd[inner]]] <= forest.cut[nd[inner]]
            node[live[inner]] = np.where(go_left, forest.left[nd[inner]], forest.right[nd[inner]])
            live = live[inner]
        per_tree = (total * np.log2(1 + np.tile(tree_mass, len(block)))).reshape(len(block), trees)
        out[start : start + len(block)] = per_tree.mean(1)
    return out


def evaluate(scores: npt.NDArray[np.float64], labels: npt.NDArray[np.float64], threshold: float) -> dict[str, Any]:
    """Accuracy, and each class's precision, recall, F1 and support (anomaly: ``score > threshold``)."""
    predicted, actual = scores > threshold, labels == 1
    out: dict[str, Any] = {"accuracy": float(np.mean(predicted == actual))}
    for name, want in (("anomaly", True), ("normal", False)):
        hits = float(np.sum((predicted == want) & (actual == want)))
        chosen, there = float(np.sum(predicted == want)), float(np.sum(actual == want))
        precision = hits / chosen if chosen else 0.0  # sklearn's zero_division=0
        recall = hits / there if there else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        out[name] = (precision, recall, f1, int(there))
    return out


def save(forest: Forest, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / MODEL_FILE).open("wb") as f:
        np.savez(f, **forest.__dict__)


def load(folder: Path) -> Forest:
    with (folder / MODEL_FILE).open("rb") as f, np.load(f, allow_pickle=False) as saved:
        return Forest(**{k: np.asarray(saved[k]) for k in Forest.__dataclass_fields__})


def _labelled(name: str, feature_dim: int) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64] | None] | None:
    """A channel's rows and labels; CSV's ``label_size`` leading columns are its labels (for a test channel without
    ``label_size``, a first column past ``feature_dim``)."""
    read = fp.channel(name, required=name == "train")
    if read is None:
        return None
    x, labels = read
    content_type = str(json.loads((fp.CONFIG / "inputdataconfig.json").read_text())[name].get("ContentType") or "")
    kind, *params = (p.strip().lower() for p in content_type.split(";"))
    if kind not in fp.CSV:
        return x, labels
    given = dict(p.split("=", 1) for p in params if "=" in p)
    try:
        label_size = int(given.get("label_size", 1 if name == "test" and x.shape[1] == feature_dim + 1 else 0))
    except ValueError:
        raise fp.AlgorithmError(f"The {name} channel's label_size is not an integer: {content_type}") from None
    if label_size not in (0, 1):
        raise fp.AlgorithmError(f"The {name} channel's label_size is {label_size}: Random Cut Forest takes 0 or 1")
    return x[:, label_size:], (x[:, 0] if label_size else None)


def main() -> None:
    hp = fp.hyperparameters(fp.raw_hyperparameters(), HYPERPARAMETERS)
    train = _labelled("train", hp["feature_dim"])
    assert train is not None
    x = train[0]
    fp.check_width(x, hp["feature_dim"], "train")
    forest = fit(x, hp)
    fp.say(f"#train (algo-1) : {len(forest.roots)} trees of {int(forest.mass[forest.roots[0]])} samples")
    fp.say(f"#train (algo-1) : anomaly threshold (mean + 3 sd of the training scores) {float(forest.threshold):.10g}")
    test = _labelled("test", hp["feature_dim"])
    if test is not None:
        tx, labels = test
        fp.check_width(tx, hp["feature_dim"], "test")
        if labels is None:
            raise fp.AlgorithmError("The test channel's records need labels (1: anomaly, 0: normal) to be scored")
        if not np.isin(labels, (0.0, 1.0)).all():
            raise fp.AlgorithmError("The test channel's labels must be 1 (anomaly) or 0 (normal)")
        result = evaluate(score(tx, forest), labels, float(forest.threshold))
        metrics: dict[str, float] = {}
        if "accuracy" in hp["eval_metrics"]:
            metrics["accuracy"] = result["accuracy"]
        if "precision_recall_fscore" in hp["eval_metrics"]:
            fp.say(f"#test_score (algo-1) : ('precision_recall_fscore', ({result['normal']}, {result['anomaly']}))")
            metrics.update(zip(("precision", "recall", "f1"), result["anomaly"][:3], strict=True))
        fp.report("test", metrics)
    save(forest, fp.MODEL_DIR)


if __name__ == "__main__":
    raise SystemExit(fp.run(main))
