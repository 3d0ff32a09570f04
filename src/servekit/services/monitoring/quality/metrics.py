"""Model quality metrics with numpy only, each equal to scikit-learn's function on the same arrays (tested to
1e-9 in ``tests/unit/services/monitoring/quality/test_quality_metrics.py``), so the monitor needs no scikit-learn.

Classes are integer codes ``0..K-1`` into the class list. Conventions are scikit-learn's:

- precision, recall and F-beta of a class are 0 when their denominator is 0 (``zero_division=0``);
- macro averages run over the classes present in the truth or the predictions (``unique_labels``), weighted
  averages weigh each class by its support (``average="weighted"``);
- ROC AUC is the Mann-Whitney statistic with ties counted half (``roc_auc_score``); multiclass is one-vs-rest,
  macro-averaged (``multi_class="ovr"``) over the classes that have both positives and negatives in the window
  (scikit-learn raises when one is missing; the classes left out are listed in ``auc_classes_skipped``);
- log loss clips probabilities to ``[eps, 1 - eps]`` (``eps`` of float64) and does not renormalise rows
  (``log_loss``);
- regression: ``mean_absolute_error``, ``mean_squared_error``, ``root_mean_squared_error``, ``r2_score`` (1.0 for
  a perfect fit of a constant truth, 0.0 otherwise; None for fewer than two rows, where scikit-learn gives NaN)
  and ``mean_absolute_percentage_error`` (``|y - ŷ| / max(|y|, eps)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
EPS = float(np.finfo(np.float64).eps)


def confusion(y_true: IntArray, y_pred: IntArray, k: int) -> IntArray:
    """``[i, j]`` = rows of true class i predicted as j (``sklearn.metrics.confusion_matrix``)."""
    return np.bincount(y_true * k + y_pred, minlength=k * k).reshape(k, k).astype(np.int64)


def _ratio(num: FloatArray, den: FloatArray) -> FloatArray:
    out = np.zeros_like(num, dtype=np.float64)
    np.divide(num, den, out=out, where=den > 0)
    return out


@dataclass(frozen=True, slots=True)
class PerClass:
    precision: FloatArray
    recall: FloatArray
    f1: FloatArray
    support: IntArray
    present: npt.NDArray[np.bool_]  # in the truth or the predictions


def fbeta(tp: FloatArray, fp: FloatArray, fn: FloatArray, beta: float) -> FloatArray:
    b2 = beta * beta
    return _ratio((1 + b2) * tp, (1 + b2) * tp + b2 * fn + fp)


def per_class(cm: IntArray) -> PerClass:
    tp = np.diag(cm).astype(np.float64)
    pred = cm.sum(axis=0).astype(np.float64)
    true = cm.sum(axis=1).astype(np.float64)
    fp, fn = pred - tp, true - tp
    return PerClass(
        _ratio(tp, pred), _ratio(tp, true), fbeta(tp, fp, fn, 1.0), true.astype(np.int64), (pred + true) > 0
    )


def auc_binary(positive: npt.NDArray[np.bool_], score: FloatArray) -> float | None:
    """ROC AUC of ``score`` for the rows where ``positive``; None without positives or negatives."""
    n = len(score)
    n_pos = int(positive.sum())
    n_neg = n - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    order = np.argsort(score, kind="mergesort")
    s = score[order]
    starts = np.concatenate([[0], np.flatnonzero(s[1:] != s[:-1]) + 1])
    ends = np.concatenate([starts[1:], [n]])
    mean_rank = (starts + ends + 1) / 2.0  # 1-based average rank of each group of tied scores
    pos_in_group = np.add.reduceat(positive[order].astype(np.float64), starts)
    rank_sum = float(np.dot(pos_in_group, mean_rank))
    return (rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)


def log_loss(y_true: IntArray, proba: FloatArray) -> float | None:
    """Mean negative log-probability of the true class; ``proba`` is [N, K] (columns = class codes)."""
    if len(y_true) == 0 or int(y_true.max()) >= proba.shape[1]:
        return None
    p = np.clip(proba[np.arange(len(y_true)), y_true], EPS, 1 - EPS)
    return float(np.mean(-np.log(p)))


def classification(
    y_true: IntArray, y_pred: IntArray, classes: Sequence[str], proba: FloatArray | None, positive: int | None
) -> dict[str, Any]:
    """Every classification metric of one window. ``positive`` (binary problems) is the positive class's code;
    ``proba`` holds each class's probability ([N, K]) or the positive class's ([N]), or is None."""
    k = len(classes)
    n = len(y_true)
    cm = confusion(y_true, y_pred, k)
    pc = per_class(cm)
    present = pc.present
    macro = {
        "precision_macro": float(pc.precision[present].mean()) if present.any() else None,
        "recall_macro": float(pc.recall[present].mean()) if present.any() else None,
        "f1_macro": float(pc.f1[present].mean()) if present.any() else None,
    }
    total = pc.support.sum()
    weights = pc.support / total if total else None
    out: dict[str, Any] = {
        "accuracy": float(np.trace(cm) / n) if n else None,
        **macro,
        "weighted_precision": float(np.dot(weights, pc.precision)) if weights is not None else None,
        "weighted_recall": float(np.dot(weights, pc.recall)) if weights is not None else None,
        "weighted_f1": float(np.dot(weights, pc.f1)) if weights is not None else None,
    }
    if positive is not None:
        tp = float(cm[positive, positive])
        fp = float(cm[:, positive].sum()) - tp
        fn = float(cm[positive, :].sum()) - tp
        tn = float(n) - tp - fp - fn
        a = np.array([tp]), np.array([fp]), np.array([fn])
        out.update(
            precision=float(_ratio(a[0], a[0] + a[1])[0]),
            recall=float(_ratio(a[0], a[0] + a[2])[0]),
            f1=float(fbeta(*a, 1.0)[0]),
            f0_5=float(fbeta(*a, 0.5)[0]),
            f2=float(fbeta(*a, 2.0)[0]),
            true_positive_rate=float(_ratio(a[0], a[0] + a[2])[0]),
            true_negative_rate=float(_ratio(np.array([tn]), np.array([tn + fp]))[0]),
            false_positive_rate=float(_ratio(a[1], np.array([tn + fp]))[0]),
            false_negative_rate=float(_ratio(a[2], a[0] + a[2])[0]),
        )
    out["auc"], out["log_loss"], skipped = None, None, []
    if proba is not None and n:
        if proba.ndim == 1:  # the positive class's probability
            assert positive is not None
            out["auc"] = auc_binary(y_true == positive, proba)
            other = 1 - positive
            two = np.zeros((n, 2))
            two[:, positive], two[:, other] = proba, 1 - proba
            out["log_loss"] = log_loss(y_true, two) if k == 2 else None
        else:
            if positive is not None:
                out["auc"] = auc_binary(y_true == positive, proba[:, positive])
            else:
                aucs = []
                for c in range(min(k, proba.shape[1])):
                    a_c = auc_binary(y_true == c, proba[:, c])
                    if a_c is None:
                        skipped.append(classes[c])
                    else:
                        aucs.append(a_c)
                out["auc"] = float(np.mean(aucs)) if aucs else None
            out["log_loss"] = log_loss(y_true, proba)
    per = {
        classes[c]: {
            "precision": float(pc.precision[c]),
            "recall": float(pc.recall[c]),
            "f1": float(pc.f1[c]),
            "support": int(pc.support[c]),
        }
        for c in range(k)
        if present[c]
    }
    return {
        "metrics": out,
        "per_class": per,
        "confusion_matrix": {"labels": list(classes), "matrix": cm.tolist()},
        "auc_classes_skipped": skipped,
    }


def regression(y_true: FloatArray, y_pred: FloatArray) -> dict[str, Any]:
    n = len(y_true)
    if n == 0:
        return {"metrics": dict.fromkeys(("mae", "mse", "rmse", "r2", "mape"))}
    err = y_true - y_pred
    mse = float(np.mean(err * err))
    ss_res = float(np.sum(err * err))
    ss_tot = float(np.sum((y_true - np.mean(y_true)) ** 2))
    if n < 2:
        r2: float | None = None
    elif ss_tot == 0:
        r2 = 1.0 if ss_res == 0 else 0.0
    else:
        r2 = 1 - ss_res / ss_tot
    return {
        "metrics": {
            "mae": float(np.mean(np.abs(err))),
            "mse": mse,
            "rmse": float(np.sqrt(mse)),
            "r2": r2,
            "mape": float(np.mean(np.abs(err) / np.maximum(np.abs(y_true), EPS))),
        }
    }
