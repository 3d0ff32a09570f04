"""Model-quality metrics benchmark (not a test): servekit's numpy metrics against scikit-learn's functions on the
same 1M labelled rows, time (best of ``--repeat``) and the largest difference between the two.

    python benchmarks/quality_bench.py --rows 1000000
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from sklearn import metrics as sk

from servekit.services.monitoring.quality import metrics as qm


def best(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    n, rng = args.rows, np.random.default_rng(0)

    y = rng.integers(0, 2, n)
    p = np.clip(rng.normal(0.3 + 0.4 * y, 0.2), 0, 1).round(4)
    pred = (p >= 0.5).astype(np.int64)

    def sk_binary() -> dict[str, float]:
        return {
            "accuracy": sk.accuracy_score(y, pred),
            "precision": sk.precision_score(y, pred),
            "recall": sk.recall_score(y, pred),
            "f1": sk.f1_score(y, pred),
            "f1_macro": sk.f1_score(y, pred, average="macro"),
            "auc": sk.roc_auc_score(y, p),
            "log_loss": sk.log_loss(y, p),
        }

    t_ours, ours = best(lambda: qm.classification(y, pred, ["0", "1"], p, positive=1)["metrics"], args.repeat)
    t_sk, ref = best(sk_binary, args.repeat)
    diff = max(abs(ours[k] - v) for k, v in ref.items())
    print(f"binary, {n} rows (accuracy, precision, recall, F1, F1 macro, ROC AUC, log loss + confusion matrix, "
          f"per class, weighted, rates): servekit {t_ours:.3f} s; scikit-learn (the 7 functions) {t_sk:.3f} s; "
          f"max |difference| {diff:.2e}")  # fmt: skip

    k = 5
    yk = rng.integers(0, k, n)
    logits = rng.normal(size=(n, k)) + 1.2 * np.eye(k)[yk]
    proba = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    predk = proba.argmax(axis=1)

    def sk_multi() -> dict[str, float]:
        return {
            "accuracy": sk.accuracy_score(yk, predk),
            "f1_macro": sk.f1_score(yk, predk, average="macro"),
            "weighted_f1": sk.f1_score(yk, predk, average="weighted"),
            "auc": sk.roc_auc_score(yk, proba, multi_class="ovr"),
            "log_loss": sk.log_loss(yk, proba),
        }

    classes = [str(c) for c in range(k)]
    t_ours, ours = best(lambda: qm.classification(yk, predk, classes, proba, positive=None)["metrics"], args.repeat)
    t_sk, ref = best(sk_multi, args.repeat)
    diff = max(abs(ours[m] - v) for m, v in ref.items())
    print(f"multiclass ({k} classes), {n} rows: servekit {t_ours:.3f} s; scikit-learn (accuracy, F1 macro, "
          f"F1 weighted, OVR AUC, log loss) {t_sk:.3f} s; max |difference| {diff:.2e}")  # fmt: skip

    yr = rng.normal(100, 20, n)
    yhat = yr + rng.normal(0, 5, n)

    def sk_reg() -> dict[str, float]:
        return {
            "mae": sk.mean_absolute_error(yr, yhat),
            "mse": sk.mean_squared_error(yr, yhat),
            "rmse": sk.root_mean_squared_error(yr, yhat),
            "r2": sk.r2_score(yr, yhat),
            "mape": sk.mean_absolute_percentage_error(yr, yhat),
        }

    t_ours, ours = best(lambda: qm.regression(yr, yhat)["metrics"], args.repeat)
    t_sk, ref = best(sk_reg, args.repeat)
    diff = max(abs(ours[m] - v) for m, v in ref.items())
    print(f"regression, {n} rows: servekit {t_ours:.3f} s; scikit-learn (MAE, MSE, RMSE, R2, MAPE) {t_sk:.3f} s; "
          f"max |difference| {diff:.2e}")  # fmt: skip


if __name__ == "__main__":
    main()
