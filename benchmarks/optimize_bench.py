"""Models and data for ``servekit optimize``'s recorded measurement (benchmarks/OPTIMIZE_RESULTS.md).

    python benchmarks/optimize_bench.py /tmp/optbench   # builds the models, prints the commands to run

- mlp_sklearn: an sklearn MLPClassifier 64 -> 256 -> 256 -> 10 trained on a synthetic 10-class problem (5,000
  rows; 1,000 more held out as validation.jsonl / labels.jsonl), saved with joblib as servekit serves it.
- iris: the demo's iris (LogisticRegression, joblib) with the 150 iris rows as validation.
- heavy: benchmarks/models.py's compute-bound ONNX MLP (512 -> 1536 x 3 -> 10, random weights): ONNX in, ONNX
  out, so the int8 effect is measured alone; 1,000 random rows as validation (no labels: agreement only).
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import joblib
import numpy as np
from sklearn.datasets import load_iris, make_classification
from sklearn.exceptions import ConvergenceWarning
from sklearn.neural_network import MLPClassifier

from servekit.tools.demo.build import iris_sklearn

sys.path.insert(0, str(Path(__file__).parent))
from models import heavy


def _jsonl(path: Path, values: list[object]) -> Path:
    path.write_text("".join(json.dumps(v) + "\n" for v in values))
    return path


def build(base: Path) -> list[str]:
    x, y = make_classification(6000, 64, n_informative=40, n_classes=10, class_sep=2.0, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mlp = MLPClassifier((256, 256), max_iter=60, random_state=0).fit(x[:5000], y[:5000])
    (base / "mlp_sklearn" / "1").mkdir(parents=True, exist_ok=True)
    joblib.dump(mlp, base / "mlp_sklearn" / "1" / "model.joblib")
    _jsonl(base / "mlp_validation.jsonl", [r.tolist() for r in x[5000:]])
    _jsonl(base / "mlp_labels.jsonl", [int(v) for v in y[5000:]])

    iris_sklearn(base / "iris_sklearn" / "1")
    ix, iy = load_iris(return_X_y=True)
    _jsonl(base / "iris_validation.jsonl", [r.tolist() for r in ix])
    _jsonl(base / "iris_labels.jsonl", [int(v) for v in iy])
    heavy(base / "heavy" / "1")
    hx = np.random.default_rng(7).standard_normal((1000, 512)).round(4)
    _jsonl(base / "heavy_validation.jsonl", [r.tolist() for r in hx])
    return [
        f"servekit optimize --model {base}/heavy/1 --out {base}/out_heavy_int8 --quantize int8 "
        f"--validation {base}/heavy_validation.jsonl --json {base}/heavy_int8.json",
        f"servekit optimize --model {base}/mlp_sklearn/1 --out {base}/out_mlp_none --quantize none "
        f"--validation {base}/mlp_validation.jsonl --labels {base}/mlp_labels.jsonl --json {base}/mlp_none.json",
        f"servekit optimize --model {base}/mlp_sklearn/1 --out {base}/out_mlp_int8 --quantize int8 "
        f"--validation {base}/mlp_validation.jsonl --labels {base}/mlp_labels.jsonl --json {base}/mlp_int8.json",
        f"servekit optimize --model {base}/iris_sklearn/1 --out {base}/out_iris "
        f"--validation {base}/iris_validation.jsonl --labels {base}/iris_labels.jsonl --json {base}/iris.json",
    ]


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "optimize-bench").resolve()
    for command in build(target):
        print(command)
