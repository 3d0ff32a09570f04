"""Model quality metrics equal scikit-learn's functions on the same arrays, to 1e-9."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn import metrics as sk

from servekit.services.monitoring.quality import metrics as qm

TOL = 1e-9


def close(a: float | None, b: float) -> bool:
    return a is not None and abs(a - b) <= TOL


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("n", [7, 200, 5000])
def test_binary_classification(seed: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    y[:2] = [0, 1]
    p = np.clip(rng.normal(0.35 + 0.3 * y, 0.25), 0, 1).round(2)  # rounded: many ties
    pred = (p >= 0.5).astype(np.int64)
    out = qm.classification(y, pred, ["0", "1"], p, positive=1)
    m = out["metrics"]
    assert close(m["accuracy"], sk.accuracy_score(y, pred))
    assert close(m["precision"], sk.precision_score(y, pred, zero_division=0))
    assert close(m["recall"], sk.recall_score(y, pred, zero_division=0))
    assert close(m["f1"], sk.f1_score(y, pred, zero_division=0))
    assert close(m["f0_5"], sk.fbeta_score(y, pred, beta=0.5, zero_division=0))
    assert close(m["f2"], sk.fbeta_score(y, pred, beta=2, zero_division=0))
    assert close(m["f1_macro"], sk.f1_score(y, pred, average="macro", zero_division=0))
    assert close(m["precision_macro"], sk.precision_score(y, pred, average="macro", zero_division=0))
    assert close(m["recall_macro"], sk.recall_score(y, pred, average="macro", zero_division=0))
    assert close(m["weighted_f1"], sk.f1_score(y, pred, average="weighted", zero_division=0))
    assert close(m["auc"], sk.roc_auc_score(y, p))
    assert close(m["log_loss"], sk.log_loss(y, p))
    tn, fp, fn, tp = sk.confusion_matrix(y, pred).ravel()
    assert close(m["false_positive_rate"], fp / (fp + tn)) and close(m["true_negative_rate"], tn / (fp + tn))
    assert close(m["false_negative_rate"], fn / (fn + tp)) and close(m["true_positive_rate"], tp / (fn + tp))
    assert out["confusion_matrix"]["matrix"] == sk.confusion_matrix(y, pred, labels=[0, 1]).tolist()
    prec, rec, f1, sup = sk.precision_recall_fscore_support(y, pred, labels=[0, 1], zero_division=0)
    for c in (0, 1):
        pc = out["per_class"][str(c)]
        assert close(pc["precision"], prec[c]) and close(pc["recall"], rec[c]) and close(pc["f1"], f1[c])
        assert pc["support"] == sup[c]


@pytest.mark.parametrize("seed", [0, 3])
def test_multiclass_classification(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, k = 3000, 4
    y = rng.integers(0, k, n)
    logits = rng.normal(size=(n, k)) + 1.5 * np.eye(k)[y]
    proba = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    pred = proba.argmax(axis=1)
    pred[:50] = 3  # class 3 over-predicted
    out = qm.classification(y, pred, ["a", "b", "c", "d"], proba, positive=None)
    m = out["metrics"]
    assert close(m["accuracy"], sk.accuracy_score(y, pred))
    for ours, avg in (("{}_macro", "macro"), ("weighted_{}", "weighted")):
        assert close(m[ours.format("precision")], sk.precision_score(y, pred, average=avg, zero_division=0))
        assert close(m[ours.format("recall")], sk.recall_score(y, pred, average=avg, zero_division=0))
        assert close(m[ours.format("f1")], sk.f1_score(y, pred, average=avg, zero_division=0))
    assert close(m["auc"], sk.roc_auc_score(y, proba, multi_class="ovr", average="macro"))
    assert close(m["log_loss"], sk.log_loss(y, proba))
    assert out["confusion_matrix"]["matrix"] == sk.confusion_matrix(y, pred).tolist()
    assert "precision" not in m  # binary-only


def test_macro_averages_over_the_classes_seen_like_sklearn() -> None:
    y = np.array([0, 0, 1, 1, 1])
    pred = np.array([0, 1, 1, 1, 0])
    m = qm.classification(y, pred, ["0", "1", "2"], None, positive=None)["metrics"]  # class 2 never occurs
    assert close(m["f1_macro"], sk.f1_score(y, pred, average="macro"))
    assert m["auc"] is None and m["log_loss"] is None


def test_auc_and_log_loss_undefined_with_one_class() -> None:
    y = np.ones(5, dtype=np.int64)
    m = qm.classification(y, y, ["0", "1"], np.full(5, 0.9), positive=1)["metrics"]
    assert m["auc"] is None
    assert close(m["log_loss"], sk.log_loss(y, np.full(5, 0.9), labels=[0, 1]))


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("n", [2, 50, 10000])
def test_regression(seed: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    y = rng.normal(1000, 300, n)
    y[0] = 0.0  # MAPE's eps
    pred = y + rng.normal(0, 50, n)
    m = qm.regression(y, pred)["metrics"]
    assert close(m["mae"], sk.mean_absolute_error(y, pred))
    assert close(m["mse"], sk.mean_squared_error(y, pred))
    assert close(m["rmse"], sk.root_mean_squared_error(y, pred))
    assert close(m["r2"], sk.r2_score(y, pred))
    assert abs(m["mape"] - sk.mean_absolute_percentage_error(y, pred)) <= TOL * max(1.0, m["mape"])


def test_regression_edge_cases_follow_sklearn() -> None:
    assert qm.regression(np.full(4, 2.0), np.full(4, 2.0))["metrics"]["r2"] == sk.r2_score([2.0] * 4, [2.0] * 4)
    assert qm.regression(np.full(4, 2.0), np.arange(4.0))["metrics"]["r2"] == sk.r2_score([2.0] * 4, np.arange(4.0))
    assert qm.regression(np.array([1.0]), np.array([2.0]))["metrics"]["r2"] is None
    assert qm.regression(np.array([]), np.array([]))["metrics"]["mae"] is None
