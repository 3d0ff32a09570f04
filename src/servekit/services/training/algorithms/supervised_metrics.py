"""The metrics SageMaker's supervised first-party algorithms (Linear Learner, Factorization Machines) report, under
AWS's names, and the decision threshold a binary classifier is calibrated to (the one that maximises its model
selection criterion on the calibration rows)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float64]
_TINY = 1e-15


def _safe(value: float) -> float:
    """A finite number for the job's evaluation line (which reads no ``nan``): 0 where a ratio had no rows."""
    return float(value) if np.isfinite(value) else 0.0


def binary(y: Array, score: Array, predicted: Array, beta: float = 1.0) -> dict[str, float]:
    """Accuracy, precision, recall, F-beta and ROC AUC of 0/1 labels ``y`` given ``predicted`` labels and scores."""
    tp = float(np.sum((predicted == 1) & (y == 1)))
    fp = float(np.sum((predicted == 1) & (y == 0)))
    fn = float(np.sum((predicted == 0) & (y == 1)))
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    b2 = beta * beta
    f_beta = (1 + b2) * precision * recall / (b2 * precision + recall) if precision + recall else 0.0
    return {
        "binary_classification_accuracy": _safe(float(np.mean(predicted == y))),
        "binary_f_beta": _safe(f_beta),
        "precision": _safe(precision),
        "recall": _safe(recall),
        "roc_auc_score": roc_auc(y, score),
    }


def roc_auc(y: Array, score: Array) -> float:
    """The area under the ROC curve (the Mann-Whitney statistic, ties counted half); 0.5 with one class only."""
    positives, negatives = score[y == 1], score[y == 0]
    if not len(positives) or not len(negatives):
        return 0.5
    order = np.argsort(score, kind="mergesort")
    ranks = np.empty(len(score))
    ranks[order] = np.arange(1, len(score) + 1)
    for value in np.unique(score):  # ties share their mean rank
        tied = score == value
        ranks[tied] = ranks[tied].mean()
    u = ranks[y == 1].sum() - len(positives) * (len(positives) + 1) / 2
    return _safe(u / (len(positives) * len(negatives)))


def cross_entropy(y: Array, probability: Array) -> float:
    p = np.clip(probability, _TINY, 1 - _TINY)
    return _safe(float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))))


def regression(y: Array, score: Array) -> dict[str, float]:
    r = score - y
    mse = float(np.mean(r * r))
    total = float(np.sum((y - y.mean()) ** 2))
    return {
        "absolute_loss": _safe(float(np.mean(np.abs(r)))),
        "mse": _safe(mse),
        "rmse": _safe(float(np.sqrt(mse))),
        "r2": _safe(1 - float(np.sum(r * r)) / total) if total > 0 else 0.0,
    }


def multiclass(y: Array, probability: Array, top_k: int, beta: float = 1.0) -> dict[str, float]:
    """Accuracy, top-k accuracy, DCG (of the true class's rank) and macro precision, recall and F-beta."""
    classes = probability.shape[1]
    labels = y.astype(np.int64)
    predicted = probability.argmax(1)
    # the true class's rank: how many classes scored higher than it (0 for the top one)
    rank = (probability > probability[np.arange(len(y)), labels][:, None]).sum(1)
    precisions, recalls, fs = [], [], []
    b2 = beta * beta
    for c in range(classes):
        tp = float(np.sum((predicted == c) & (labels == c)))
        p = tp / float(np.sum(predicted == c)) if np.any(predicted == c) else 0.0
        r = tp / float(np.sum(labels == c)) if np.any(labels == c) else 0.0
        precisions.append(p)
        recalls.append(r)
        fs.append((1 + b2) * p * r / (b2 * p + r) if p + r else 0.0)
    return {
        "multiclass_accuracy": _safe(float(np.mean(predicted == labels))),
        "multiclass_top_k_accuracy": _safe(float(np.mean(rank < top_k))),
        "dcg": _safe(float(np.mean(1.0 / np.log2(rank + 2.0)))),
        "macro_f_beta": _safe(float(np.mean(fs))),
        "macro_precision": _safe(float(np.mean(precisions))),
        "macro_recall": _safe(float(np.mean(recalls))),
    }


def calibrate(
    y: Array, score: Array, criterion: str, beta: float, target_recall: float, target_precision: float
) -> tuple[float, float]:
    """The threshold (a record is positive when its score is above it) that does best by ``criterion`` on these
    rows (``accuracy``, ``f_beta``/``f1``, ``precision_at_target_recall``, ``recall_at_target_precision``), and its
    value there (higher is better)."""
    order = np.argsort(-score, kind="mergesort")
    s, labels = score[order], y[order]
    tp = np.concatenate([[0.0], np.cumsum(labels)])  # tp[k]: true positives when the top k rows are positive
    fp = np.concatenate([[0.0], np.cumsum(1 - labels)])
    positives = float(labels.sum())
    # a cut may only fall between different scores (rows of one score are all positive or all negative)
    cuts = np.concatenate([[0], np.nonzero(np.diff(s) != 0)[0] + 1, [len(s)]])
    tp, fp = tp[cuts], fp[cuts]
    with np.errstate(invalid="ignore", divide="ignore"):
        precision = np.where(tp + fp > 0, tp / (tp + fp), 1.0)
        recall = tp / positives if positives else np.zeros_like(tp)
        b2 = beta * beta
        f = np.where(precision + recall > 0, (1 + b2) * precision * recall / (b2 * precision + recall), 0.0)
    accuracy = (tp + (len(s) - positives - fp)) / len(s)
    if criterion in ("f_beta", "f1"):
        value = f
    elif criterion == "precision_at_target_recall":
        value = np.where(recall >= target_recall, precision, -1.0)
    elif criterion == "recall_at_target_precision":
        value = np.where(precision >= target_precision, recall, -1.0)
    else:
        value = accuracy
    best = int(np.argmax(value))
    if value[best] < 0:  # no cut reaches the target: the most accurate one
        best = int(np.argmax(accuracy))
    k = int(cuts[best])
    if k == 0:
        threshold = float(s[0])  # nothing above the top score
    elif k == len(s):
        threshold = float(s[-1]) - max(1e-6, abs(float(s[-1])) * 1e-6)
    else:
        threshold = float((s[k - 1] + s[k]) / 2)
    return threshold, float(value[best])
