"""Model quality over time: captured predictions joined to ground truth, per window, against a quality baseline.

A run reads the model's answers from capture (``side="output"`` of ``servekit.serving.capture.reader``, either layout),
joins each row to the label store by its key (``inferenceId``, else ``eventId``; ``<key>:<i>`` for the i-th row
of a request that carried several), folds the labelled rows into panes and judges each window as the pane store
finishes it (same windows, panes and release as data drift). A window with fewer labelled rows than
``min_window_rows`` is reported but not judged. Labels that arrive later count in a later run.

What the model answered is read from its output: the predicted label or value from ``inference_attribute``
(default: the output named ``label``, ``predicted_label``, ``prediction``, ``predictions``, ``output_label``,
else a sole output), class probabilities from ``probability_attribute`` (default ``probabilities``,
``probability``, ``scores``): a [N, K] output (column j = the j-th class in the constraints' class order) or a
[N] one (the positive class's probability; without an inference attribute the prediction is the positive class
when it is at least ``probability_threshold``, as SageMaker does). For an answer body a model wrote itself
(``inference.py``) an attribute names a JSON key, or a CSV column by number (``0``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from servekit.errors import ConfigError
from servekit.services.monitoring.alerts import alarms as alarm_rule
from servekit.services.monitoring.alerts.alarms import Alarm, Judgement, Key
from servekit.services.monitoring.quality import metrics as qm
from servekit.services.monitoring.quality.labels import canonical, label_floats
from servekit.services.monitoring.runs.run import time_filter, watermark
from servekit.services.monitoring.stream.panes import Finished, PaneStore
from servekit.services.monitoring.stream.sources import SourceStats, read
from servekit.services.monitoring.stream.windows import Window

FloatArray = npt.NDArray[np.float64]
PROBLEM_TYPES = ("BinaryClassification", "MulticlassClassification", "Regression")
CONSTRAINTS_KEY = {
    "BinaryClassification": "binary_classification_constraints",
    "MulticlassClassification": "multiclass_classification_constraints",
    "Regression": "regression_constraints",
}
STATISTICS_KEY = {
    "BinaryClassification": "binary_classification_metrics",
    "MulticlassClassification": "multiclass_classification_metrics",
    "Regression": "regression_metrics",
}
# Errors and losses alarm when they rise; every other metric when it falls.
LOWER_IS_BETTER = frozenset({"log_loss", "mae", "mse", "rmse", "mape", "false_positive_rate", "false_negative_rate"})
OPERATORS = {
    "LessThanThreshold": lambda v, t: v < t,
    "GreaterThanThreshold": lambda v, t: v > t,
    "LessThanOrEqualToThreshold": lambda v, t: v <= t,
    "GreaterThanOrEqualToThreshold": lambda v, t: v >= t,
}
INFERENCE_NAMES = ("label", "predicted_label", "prediction", "predictions", "output_label")
PROBABILITY_NAMES = ("probabilities", "probability", "scores")
ALARM_FEATURE = "model"  # alarms are keyed (feature, metric); quality alarms belong to the model as a whole


class QualityError(ValueError):
    """The constraints, or the model's answers, cannot be used as asked; the message says what was expected."""


@dataclass(frozen=True, slots=True)
class QualityConfig:
    problem_type: str | None = None  # None: the constraints file's
    window: int = 3600
    step: int | None = None
    since: float | None = None
    until: float | None = None
    min_window_rows: int = 100  # labelled rows
    consecutive: int = 3
    inference_attribute: str | None = None
    probability_attribute: str | None = None
    probability_threshold: float = 0.5
    positive_label: str | None = None  # binary: default the constraints', else "1" when a class, else the last
    class_labels: tuple[str, ...] = ()  # class order of probability columns; default the constraints', else sorted
    lateness: int | None = None
    batch_rows: int = 65536
    report: bool = True

    def __post_init__(self) -> None:
        if self.problem_type is not None and self.problem_type not in PROBLEM_TYPES:
            raise ConfigError(f"problem type must be one of {', '.join(PROBLEM_TYPES)}, got {self.problem_type!r}")
        if self.window < 1 or (self.step is not None and self.step < 1):
            raise ConfigError("window and step must be >= 1s")
        if self.min_window_rows < 1 or self.consecutive < 1:
            raise ConfigError("min_window_rows and consecutive must be >= 1")
        if not 0 <= self.probability_threshold <= 1:
            raise ConfigError("probability_threshold must be within 0..1")
        if self.since is not None and self.until is not None and self.since >= self.until:
            raise ConfigError("since must be before until")

    @property
    def step_seconds(self) -> int:
        return self.step if self.step is not None else self.window


@dataclass(frozen=True, slots=True)
class Constraint:
    threshold: float
    operator: str

    def violated(self, value: float) -> bool:
        return bool(OPERATORS[self.operator](value, self.threshold))


@dataclass(frozen=True, slots=True)
class Constraints:
    """SageMaker's model-quality ``constraints.json`` (``<problem>_constraints: {metric: {threshold,
    comparison_operator}}``), plus servekit's ``servekit`` block (classes, positive label) when a servekit
    quality baseline wrote it."""

    problem_type: str
    metrics: Mapping[str, Constraint]
    classes: tuple[str, ...] = ()
    positive_label: str | None = None

    @staticmethod
    def from_json(doc: Any, problem_type: str | None = None) -> Constraints:
        if not isinstance(doc, dict):
            raise QualityError("constraints must be a JSON object")
        found = [p for p, key in CONSTRAINTS_KEY.items() if isinstance(doc.get(key), dict)]
        problem = problem_type or (found[0] if len(found) == 1 else None)
        if problem is None:
            keys = ", ".join(CONSTRAINTS_KEY.values())
            raise QualityError(f"constraints need exactly one of {keys} (or give --problem-type); found {found}")
        section = doc.get(CONSTRAINTS_KEY[problem]) or {}
        if not isinstance(section, dict):
            raise QualityError(f"{CONSTRAINTS_KEY[problem]} must be an object of metric: {{threshold, ...}}")
        metrics = {}
        for name, c in section.items():
            op = c.get("comparison_operator", "LessThanThreshold") if isinstance(c, dict) else None
            if not isinstance(c, dict) or op not in OPERATORS or not isinstance(c.get("threshold"), int | float):
                raise QualityError(
                    f"constraint {name!r} must be {{threshold: number, comparison_operator: one of "
                    f"{', '.join(OPERATORS)}}}, got {c!r}"
                )
            metrics[name] = Constraint(float(c["threshold"]), op)
        extra = doc.get("servekit") or {}
        classes = tuple(str(c) for c in extra.get("classes", ()))
        positive = extra.get("positive_label")
        return Constraints(problem, metrics, classes, None if positive is None else str(positive))


@dataclass(slots=True)
class QualityPane:
    predictions: int = 0  # captured answers, labelled or not
    truth: list[pa.Array] = field(default_factory=list)  # canonical label text (classification) per batch
    pred: list[pa.Array] = field(default_factory=list)
    proba: list[FloatArray] = field(default_factory=list)
    values: list[tuple[FloatArray, FloatArray]] = field(default_factory=list)  # regression: (truth, prediction)

    @property
    def labelled(self) -> int:
        return sum(len(t) for t in self.truth) + sum(len(t) for t, _ in self.values)


@dataclass(frozen=True, slots=True)
class QualityWindow:
    window: Window
    predictions: int
    labelled: int
    status: str  # "ok" | "insufficient"
    result: dict[str, Any]  # metrics, per_class, confusion_matrix
    violations: list[dict[str, str]]
    judged: dict[str, tuple[float, Constraint]]  # metric: (value, its constraint)


@dataclass(frozen=True, slots=True)
class QualityResult:
    problem_type: str
    windows: list[QualityWindow]
    alarms: list[Alarm]
    streaks: dict[Key, int]
    stats: SourceStats
    labels: int  # in the store
    unlabelled: int  # captured answers no label joined
    warnings: list[str]


def _pick(names: Sequence[str], wanted: str | None, defaults: Sequence[str], what: str) -> str | None:
    if wanted is not None:
        if wanted in names:
            return wanted
        if wanted.isdigit() and f"_c{wanted}" in names:  # a CSV answer's column by number, as SageMaker names it
            return f"_c{wanted}"
        raise QualityError(f"the model's answers have no {what} {wanted!r} (outputs: {', '.join(names)})")
    return next((n for n in defaults if n in names), None)


def _matrix(col: pa.ChunkedArray | pa.Array) -> FloatArray:
    """A list column (or JSON list text) as an [N, K] float matrix; a number column as [N]."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_list(arr.type) or pa.types.is_fixed_size_list(arr.type) or pa.types.is_large_list(arr.type):
        lengths = pc.list_value_length(arr).to_numpy(zero_copy_only=False)
        if len(set(lengths.tolist())) > 1:
            raise QualityError("probability lists must all have the same length")
        flat = pc.cast(pc.list_flatten(arr), pa.float64()).to_numpy(zero_copy_only=False)
        return np.asarray(flat, dtype=float).reshape(len(arr), -1)
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        text = arr.to_pylist()
        if text and isinstance(text[0], str) and text[0].lstrip().startswith("["):
            return np.array([orjson.loads(t) for t in text], dtype=float)
    return np.asarray(pc.cast(arr, pa.float64(), safe=False).to_numpy(zero_copy_only=False), dtype=float)


@dataclass(frozen=True, slots=True)
class Answers:
    pred: pa.Array | None  # canonical text (classification)
    values: FloatArray | None  # regression
    proba: FloatArray | None


def answers(table: pa.Table, problem: str, cfg: QualityConfig, classes: Sequence[str], positive: str | None) -> Answers:
    """The predicted labels (or values) and probabilities in a batch of the model's answers."""
    names = table.column_names
    inf = _pick(names, cfg.inference_attribute, INFERENCE_NAMES, "inference attribute")
    if problem == "Regression":
        if inf is None:
            only = [n for n in names if not pa.types.is_nested(table.schema.field(n).type)]
            inf = only[0] if len(only) == 1 else None
        if inf is None:
            raise QualityError(f"name the predicted value with --inference-attribute (outputs: {', '.join(names)})")
        return Answers(None, _matrix(table.column(inf)).reshape(-1), None)
    prob_name = _pick(names, cfg.probability_attribute, PROBABILITY_NAMES, "probability attribute")
    proba = _matrix(table.column(prob_name)) if prob_name is not None else None
    if inf is None and proba is None and len(names) == 1:  # a sole output is the prediction
        inf = names[0]
    if inf is not None:
        return Answers(canonical(table.column(inf)), None, proba)
    assert proba is not None
    if proba.ndim == 1:  # the positive class's probability, thresholded
        pos, neg = _binary_pair(classes, positive)
        return Answers(pa.array(np.where(proba >= cfg.probability_threshold, pos, neg)), None, proba)
    if not classes:
        raise QualityError("probabilities without class labels: give --class-labels (the order of their columns)")
    order = np.asarray(classes, dtype=object)
    return Answers(pa.array(order[np.argmax(proba, axis=1)].tolist(), pa.string()), None, proba)


def _binary_pair(classes: Sequence[str], positive: str | None) -> tuple[str, str]:
    pos = positive or ("1" if not classes or "1" in classes else classes[-1])
    others = [c for c in classes if c != pos]
    return pos, others[0] if others else ("1" if pos == "0" else "0")


def sort_classes(values: Sequence[str]) -> list[str]:
    """Numeric order when every class is a number (scikit-learn's order of integer classes), else text order."""
    try:
        return sorted(set(values), key=float)
    except ValueError:
        return sorted(set(values))


def evaluate_window(
    done: Finished[QualityPane], problem: str, constraints: Constraints, cfg: QualityConfig
) -> QualityWindow:
    predictions = sum(p.predictions for p in done.panes)
    labelled = sum(p.labelled for p in done.panes)
    status = "ok" if labelled >= cfg.min_window_rows else "insufficient"
    if problem == "Regression":
        pairs = [v for p in done.panes for v in p.values]
        truth = np.concatenate([t for t, _ in pairs]) if pairs else np.zeros(0)
        pred = np.concatenate([v for _, v in pairs]) if pairs else np.zeros(0)
        result = qm.regression(truth, pred)
    else:
        result = classify(
            [x for p in done.panes for x in zip(p.truth, p.pred, _probas(p), strict=True)], problem, constraints, cfg
        )
    judged: dict[str, tuple[float, Constraint]] = {}
    violations = []
    metrics = result["metrics"]
    for name, c in constraints.metrics.items():
        value = metrics.get(name)
        if value is None or not math.isfinite(value):
            continue
        judged[name] = (value, c)
        if status == "ok" and c.violated(value):
            violations.append(
                {
                    "metric_name": name,
                    "constraint_check_type": c.operator,
                    "description": f"Metric {name} with {value:.6g} was {c.operator} {c.threshold:.6g}",
                }
            )
    return QualityWindow(done.window, predictions, labelled, status, result, violations, judged)


def _probas(p: QualityPane) -> list[FloatArray | None]:
    return list(p.proba) if len(p.proba) == len(p.truth) else [None] * len(p.truth)


def classify(
    parts: Sequence[tuple[pa.Array, pa.Array, FloatArray | None]],
    problem: str,
    constraints: Constraints,
    cfg: QualityConfig,
) -> dict[str, Any]:
    truth = pa.concat_arrays([t for t, _, _ in parts]) if parts else pa.array([], pa.string())
    pred = pa.concat_arrays([p for _, p, _ in parts]) if parts else pa.array([], pa.string())
    known = list(cfg.class_labels or constraints.classes)
    seen = sort_classes([v for v in pc.unique(pa.concat_arrays([truth, pred])).to_pylist() if v is not None])
    classes = known + [c for c in seen if c not in known] if known else seen
    positive = None
    if problem == "BinaryClassification":
        pos, _ = _binary_pair(classes, cfg.positive_label or constraints.positive_label)
        if pos not in classes:
            classes.append(pos)
        positive = classes.index(pos)
    lookup = pa.array(classes, pa.string())
    y_true = np.asarray(pc.index_in(truth, value_set=lookup).to_numpy(zero_copy_only=False), dtype=np.int64)
    y_pred = np.asarray(pc.index_in(pred, value_set=lookup).to_numpy(zero_copy_only=False), dtype=np.int64)
    probas = [p for _, _, p in parts]
    proba = None
    if parts and all(p is not None for p in probas):
        stacked = np.concatenate([p for p in probas if p is not None])
        if stacked.ndim == 2 and problem == "BinaryClassification" and stacked.shape[1] == 2:
            stacked = stacked[:, positive] if positive is not None and positive < 2 else stacked[:, 1]
        proba = stacked
    if problem == "BinaryClassification" and len(classes) > 2:
        raise QualityError(f"a binary problem with {len(classes)} classes: {', '.join(classes[:10])}")
    return qm.classification(y_true, y_pred, classes, proba, positive)


def run_quality(
    capture: str,
    labels: pa.Table,
    constraints: Constraints,
    cfg: QualityConfig,
    *,
    streaks: Mapping[Key, int] | None = None,
    first_index: int = 0,
    store: PaneStore[QualityPane] | None = None,
) -> QualityResult:
    problem = cfg.problem_type or constraints.problem_type
    step = cfg.step_seconds
    store = store or PaneStore(cfg.window, step, QualityPane, since=cfg.since, until=cfg.until, first_index=first_index)
    stats = SourceStats()
    label_ids = labels.column("id").combine_chunks()
    label_values = labels.column("label").combine_chunks()
    classes = list(cfg.class_labels or constraints.classes)
    positive = cfg.positive_label or constraints.positive_label
    windows: list[QualityWindow] = []
    raised: list[Alarm] = []
    state = dict(streaks or {})
    newest = -math.inf
    unlabelled = 0

    def judge(done: Finished[QualityPane]) -> None:
        nonlocal state
        w = evaluate_window(done, problem, constraints, cfg)
        windows.append(w)
        judgements = (
            {(ALARM_FEATURE, m): Judgement(v, c.threshold, c.violated(v)) for m, (v, c) in w.judged.items()}
            if w.status == "ok"
            else {}
        )
        state, new = alarm_rule.step(state, w.window.index, judgements, cfg.consecutive)
        raised.extend(new)

    for batch in read(capture, since=cfg.since, until=cfg.until, batch_rows=cfg.batch_rows, stats=stats, side="output"):
        if batch.keys is None or batch.timestamps is None:
            raise QualityError(f"{capture!r}: not capture data (model quality reads the model's captured answers)")
        keep = time_filter(batch.timestamps, cfg.since, cfg.until, stats)
        if keep.any():
            ok, ids = store.admit(batch.timestamps[keep])
            keep[keep] = ok
        if keep.any():
            rows = np.flatnonzero(keep)
            table = batch.table.take(pa.array(rows))
            times = batch.timestamps[keep]
            ids = np.floor(times / store.pane).astype(np.int64)
            newest = max(newest, float(times.max()))
            keys = pa.array([batch.keys[i] for i in rows.tolist()], pa.string())
            found = pc.index_in(keys, value_set=label_ids)
            has = np.asarray(pc.is_valid(found).to_numpy(zero_copy_only=False), dtype=bool)
            unlabelled += int((~has).sum())
            for k in np.unique(ids).tolist():
                store.get(k).predictions += int((ids == k).sum())
            if has.any():
                got = answers(table.filter(pa.array(has)), problem, cfg, classes, positive)
                truth = label_values.take(pc.filter(found, pa.array(has)))
                pane_of = ids[has]
                for k in np.unique(pane_of).tolist():
                    sel = pane_of == k
                    pane = store.get(k)
                    mask = pa.array(sel)
                    if problem == "Regression":
                        assert got.values is not None
                        pane.values.append((label_floats(truth.filter(mask)), got.values[sel]))
                    else:
                        assert got.pred is not None
                        pane.truth.append(truth.filter(mask))
                        pane.pred.append(got.pred.filter(mask))
                        if got.proba is not None:
                            pane.proba.append(got.proba[sel])
        for done in store.ready(watermark(batch.watermark, newest, cfg.lateness)):
            judge(done)
    for done in store.finish():
        judge(done)
    stats.late_rows = store.late_rows
    warnings = []
    if labels.num_rows == 0:
        warnings.append("the label store holds no labels yet: every window is insufficient")
    return QualityResult(problem, windows, raised, state, stats, labels.num_rows, unlabelled, warnings)
