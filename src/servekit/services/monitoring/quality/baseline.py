"""A model-quality baseline: metrics of labelled predictions (e.g. a validation set) and suggested constraints, in
SageMaker Model Monitor's model-quality shapes.

``statistics.json``: ``{"version": 0.0, "dataset": {"item_count"}, "<problem>_metrics": {METRIC: {"value",
"standard_deviation"}, "confusion_matrix": {ACTUAL: {PREDICTED: count}}}}``; ``constraints.json``:
``{"version": 0.0, "<problem>_constraints": {METRIC: {"threshold", "comparison_operator"}}}`` with
``<problem>`` one of ``binary_classification``, ``multiclass_classification``, ``regression``. Both carry a
``servekit`` block (the class order and the positive label) that SageMaker's readers ignore.

**Suggested thresholds.** The rows are dealt into ``chunks`` (10) random parts (seeded); a metric's
``standard_deviation`` is its sample standard deviation (ddof = 1) over the parts, i.e. its spread on samples of
a tenth of the baseline. A metric where higher is better gets ``LessThanThreshold`` at ``value - k·std``, an
error or loss (``log_loss``, ``mae``, ``mse``, ``rmse``, ``mape``, false positive/negative rates)
``GreaterThanThreshold`` at ``value + k·std``, ``k = 3``. So a window of about a tenth of the baseline's rows
whose model is as good as at baseline time crosses a threshold rarely; smaller windows are noisier. Edit the
file to taste: a run reads it as it is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from servekit.services.monitoring.quality import metrics as qm
from servekit.services.monitoring.quality.labels import canonical, label_floats
from servekit.services.monitoring.quality.run import (
    CONSTRAINTS_KEY,
    LOWER_IS_BETTER,
    STATISTICS_KEY,
    Constraints,
    QualityConfig,
    QualityError,
    answers,
    classify,
    sort_classes,
)
from servekit.services.monitoring.stream.sources import read


def build(
    data: str,
    problem: str,
    ground_truth: str,
    cfg: QualityConfig,
    *,
    chunks: int = 10,
    k: float = 3.0,
    seed: int = 0,
    now: datetime | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(statistics, constraints)`` of the labelled predictions in ``data`` (CSV, Parquet or JSON lines with the
    ground-truth column and the model's answer columns named by ``cfg``)."""
    if chunks < 2:
        raise QualityError("chunks must be >= 2")
    truth_parts: list[pa.Array] = []
    tables: list[pa.Table] = []
    for batch in read(data):
        t = batch.table
        if ground_truth not in t.column_names:
            raise QualityError(
                f"{data}: no ground-truth column {ground_truth!r} (columns: {', '.join(t.column_names)})"
            )
        truth_parts.append(canonical(t.column(ground_truth)))
        tables.append(t.drop_columns([ground_truth]))
    if not tables:
        raise QualityError(f"{data}: no rows")
    table = pa.concat_tables(tables, promote_options="permissive")
    truth = pa.concat_arrays(truth_parts)
    valid = pc.is_valid(truth)
    table, truth = table.filter(valid), truth.filter(valid)
    n = table.num_rows
    if n < chunks:
        raise QualityError(f"{data}: {n} labelled rows, fewer than the {chunks} chunks")
    classes: list[str] = []
    positive = cfg.positive_label
    if problem != "Regression":
        classes = list(cfg.class_labels)
        if not classes:
            pred_col = cfg.inference_attribute
            seen = truth.to_pylist()
            if pred_col and pred_col in table.column_names:
                seen += canonical(table.column(pred_col)).to_pylist()
            classes = sort_classes([v for v in seen if v is not None])
    got = answers(table, problem, cfg, classes, positive)
    base = Constraints(problem, {}, tuple(classes), positive)

    def metrics(rows: np.ndarray[Any, np.dtype[np.int64]] | None) -> dict[str, Any]:
        if problem == "Regression":
            assert got.values is not None
            y, p = label_floats(truth), got.values
            if rows is not None:
                y, p = y[rows], p[rows]
            ok = np.isfinite(y) & np.isfinite(p)
            return qm.regression(y[ok], p[ok])
        assert got.pred is not None
        t, p, pr = truth, got.pred, got.proba
        if rows is not None:
            idx = pa.array(rows)
            t, p = t.take(idx), p.take(idx)
            pr = pr[rows] if pr is not None else None
        return classify([(t, p, pr)], problem, base, cfg)

    full = metrics(None)
    rng = np.random.default_rng(seed)
    parts = np.array_split(rng.permutation(n), chunks)
    per_chunk = [metrics(np.sort(p))["metrics"] for p in parts]
    stats_section: dict[str, Any] = {}
    constraints_section: dict[str, Any] = {}
    for name, value in full["metrics"].items():
        if value is None or not math.isfinite(value):
            continue
        values = [c[name] for c in per_chunk if c.get(name) is not None and math.isfinite(c[name])]
        std = float(np.std(values, ddof=1)) if len(values) >= 2 else 0.0
        stats_section[name] = {"value": value, "standard_deviation": std}
        if name in LOWER_IS_BETTER:
            constraints_section[name] = {"threshold": value + k * std, "comparison_operator": "GreaterThanThreshold"}
        else:
            constraints_section[name] = {"threshold": value - k * std, "comparison_operator": "LessThanThreshold"}
    if "confusion_matrix" in full:
        stats_section["confusion_matrix"] = sagemaker_confusion(full["confusion_matrix"])
    when = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    extra: dict[str, Any] = {"problem_type": problem, "chunks": chunks, "k": k, "rows": n}
    if problem != "Regression":
        final = full["confusion_matrix"]["labels"]
        extra["classes"] = final
        if problem == "BinaryClassification":
            extra["positive_label"] = positive or ("1" if "1" in final else final[-1])
    statistics = {
        "version": 0.0,
        "dataset": {"item_count": n, "evaluation_time": when},
        STATISTICS_KEY[problem]: stats_section,
        "servekit": {**extra, "per_class": full.get("per_class", {})},
    }
    constraints = {"version": 0.0, CONSTRAINTS_KEY[problem]: constraints_section, "servekit": extra}
    return statistics, constraints


def sagemaker_confusion(cm: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    """``{"labels": [...], "matrix": [[...]]}`` as SageMaker's ``{actual: {predicted: count}}``."""
    labels: Sequence[str] = cm["labels"]
    return {a: {p: int(cm["matrix"][i][j]) for j, p in enumerate(labels)} for i, a in enumerate(labels)}
