"""How much the new version's answers differ from the old one's, and from the labels when there are any.

The task is read from the original's signatures: a classify signature (or a 2-D float output, read as scores)
is classification, a regress signature (or a single float column) is regression. Whatever the task, every
float output the two versions share is compared number for number.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from servekit.errors import ConfigError
from servekit.serving.runtime.base import Servable
from servekit.tools.optimize.data import Dataset
from servekit.types import CLASSIFY_METHOD, DEFAULT_SIGNATURE, REGRESS_METHOD

CHUNK = 1024  # rows per predict call: bounded memory on a large validation set


@dataclass(frozen=True, slots=True)
class Task:
    kind: str  # "classification" or "regression"
    signature: str
    output: str
    class_labels: tuple[str, ...] = ()


@dataclass(slots=True)
class Quality:
    task: str
    rows: int
    signature: str
    output: str
    # label agreement of the two versions (classification), share of rows where they name the same class
    agreement: float | None = None
    # number-for-number difference of every shared numeric output: {"name": {"max_abs": .., "mean_abs": ..}}
    output_diff: dict[str, dict[str, float]] = field(default_factory=dict)
    accuracy_before: float | None = None
    accuracy_after: float | None = None
    mae_before: float | None = None
    mae_after: float | None = None
    rmse_before: float | None = None
    rmse_after: float | None = None
    drop: float = 0.0  # what --max-accuracy-drop bounds
    drop_basis: str = ""


def find_task(servable: Servable) -> Task:
    """Classification when there is a classify signature or the output is a 2-D float with several columns (read
    as class scores: the class is the highest), or a non-float output (the label itself); else regression."""
    sigs = servable.signatures
    for sig in sigs.values():
        if sig.method == CLASSIFY_METHOD and sig.outputs:
            return Task("classification", sig.name, sig.outputs[0].name, sig.class_labels)
    for sig in sigs.values():
        if sig.method == REGRESS_METHOD and sig.outputs and sig.outputs[0].shape[1:] in ((), (1,)):
            return Task("regression", sig.name, sig.outputs[0].name)
    # The ONNX runtime offers "regress" for any single float output; a multi-column one reads better as the
    # default signature's scores.
    sig = sigs.get(DEFAULT_SIGNATURE) or next(iter(sigs.values()))
    if not sig.outputs:
        raise ConfigError(f"signature {sig.name!r} has no outputs to compare")
    out = sig.outputs[0]
    if out.dtype.kind == "f":
        scores = len(out.shape) == 2 and out.shape[1] != 1
        return Task("classification" if scores else "regression", sig.name, out.name)
    return Task("classification", sig.name, out.name)


def _run(servable: Servable, signature: str, data: Dataset) -> dict[str, npt.NDArray[Any]]:
    parts: dict[str, list[npt.NDArray[Any]]] = {}
    for start in range(0, data.rows, CHUNK):
        chunk = {k: v[start : start + CHUNK] for k, v in data.inputs.items()}
        for name, arr in servable.predict(signature, chunk).items():
            parts.setdefault(name, []).append(np.asarray(arr))
    return {name: np.concatenate(arrs) for name, arrs in parts.items()}


def _classes(values: npt.NDArray[Any], task: Task) -> npt.NDArray[Any]:
    """Predicted class names: the top score's label (or index), or the label output itself."""
    if values.dtype.kind == "f" and values.ndim == 2:
        top = values.argmax(axis=1)
        names = task.class_labels or tuple(str(i) for i in range(values.shape[1]))
        return np.asarray([names[i] for i in top], dtype=object)
    return np.asarray([v.decode() if isinstance(v, bytes) else str(v) for v in values.reshape(-1)], dtype=object)


def _label_names(labels: Sequence[Any], task: Task, k: int) -> npt.NDArray[Any]:
    """Labels as class names: a class name as is, an integer as an index into the class labels."""
    names = task.class_labels or tuple(str(i) for i in range(k))
    known = set(names)
    out = []
    for i, label in enumerate(labels):
        text = str(label)
        if text in known or not names:
            out.append(text)
        elif isinstance(label, int) and not isinstance(label, bool) and 0 <= label < len(names):
            out.append(names[label])
        else:
            raise ConfigError(f"label {label!r} (row {i + 1}) is not one of the model's classes {list(names)}")
    return np.asarray(out, dtype=object)


def _numeric_diff(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> dict[str, float] | None:
    """Max/mean absolute difference of a float output; integer outputs are class ids, which agreement covers
    (a difference of 7 between class 2 and class 9 means nothing)."""
    if a.dtype.kind != "f" or b.dtype.kind != "f" or a.size != b.size:
        return None
    diff = np.abs(a.astype(np.float64).reshape(-1) - b.astype(np.float64).reshape(-1))
    return {
        "max_abs": float(np.nanmax(diff)) if diff.size else 0.0,
        "mean_abs": float(np.nanmean(diff)) if diff.size else 0.0,
    }


def compare(before: Servable, after: Servable, data: Dataset) -> Quality:
    task = find_task(before)
    if task.signature not in after.signatures:
        raise ConfigError(f"the optimized model lost the signature {task.signature!r}")
    quality = Quality(task.kind, data.rows, task.signature, task.output)
    shared = [s for s in (DEFAULT_SIGNATURE, task.signature) if s in before.signatures and s in after.signatures]
    results = {s: (_run(before, s, data), _run(after, s, data)) for s in dict.fromkeys(shared)}
    for old, new in results.values():
        for name in old.keys() & new.keys():
            diff = _numeric_diff(old[name], new[name])
            if diff is not None:
                quality.output_diff[name] = diff
    old_out, new_out = (r[task.output] for r in results[task.signature])

    if task.kind == "classification":
        old_cls, new_cls = _classes(old_out, task), _classes(new_out, task)
        quality.agreement = float(np.mean(old_cls == new_cls))
        if data.labels is not None:
            k = old_out.shape[1] if old_out.ndim == 2 else 0
            truth = _label_names(data.labels, task, k)
            quality.accuracy_before = float(np.mean(old_cls == truth))
            quality.accuracy_after = float(np.mean(new_cls == truth))
            quality.drop = quality.accuracy_before - quality.accuracy_after
            quality.drop_basis = "accuracy on the labels"
        else:
            quality.drop = 1.0 - quality.agreement
            quality.drop_basis = "share of rows where the two versions disagree (no labels given)"
        return quality

    old_y, new_y = old_out.astype(np.float64).reshape(-1), new_out.astype(np.float64).reshape(-1)
    if data.labels is not None:
        try:
            truth = np.asarray(data.labels, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise ConfigError("regression labels must be numbers") from None
        if truth.size != old_y.size:
            raise ConfigError(f"{truth.size} labels for {old_y.size} predictions (one number per row)")
        quality.mae_before = float(np.mean(np.abs(old_y - truth)))
        quality.mae_after = float(np.mean(np.abs(new_y - truth)))
        quality.rmse_before = float(np.sqrt(np.mean((old_y - truth) ** 2)))
        quality.rmse_after = float(np.sqrt(np.mean((new_y - truth) ** 2)))
        base = quality.mae_before or 1.0
        quality.drop = (quality.mae_after - quality.mae_before) / base
        quality.drop_basis = "relative increase of the MAE on the labels"
    else:
        scale = float(np.mean(np.abs(old_y))) or 1.0
        quality.drop = float(np.mean(np.abs(new_y - old_y))) / scale
        quality.drop_basis = "mean absolute difference relative to the mean absolute prediction (no labels given)"
    return quality
