"""Validation and calibration rows from JSON Lines, checked against the model's input signature.

A line is one example: a JSON list of feature values, or an object keyed by the model's feature names (from
``servekit.toml``) or by its input names. Labels come from a file of one JSON value per line, or from a key of
each object (``--label-column``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from servekit.errors import ConfigError
from servekit.types import Signature


@dataclass(frozen=True, slots=True)
class Dataset:
    inputs: dict[str, npt.NDArray[Any]]
    rows: int
    labels: tuple[Any, ...] | None = None


def _lines(path: Path, what: str) -> list[tuple[int, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the {what} {path}: {exc}") from None
    out = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append((lineno, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{lineno}: not JSON ({exc.msg} at column {exc.colno})") from None
    if not out:
        raise ConfigError(f"the {what} {path} holds no rows")
    return out


def _row(doc: Any, sig: Signature, where: str, label_column: str | None) -> tuple[dict[str, Any], Any]:
    label = None
    if isinstance(doc, dict):
        if label_column is not None:
            if label_column not in doc:
                raise ConfigError(f"{where}: no {label_column!r} key (--label-column)")
            doc = dict(doc)
            label = doc.pop(label_column)
        names = [t.name for t in sig.inputs]
        if sig.feature_names and set(sig.feature_names) <= set(doc):
            doc = [doc[f] for f in sig.feature_names]
        elif set(names) <= set(doc):
            return {n: doc[n] for n in names}, label
        else:
            expected = list(sig.feature_names) or names
            raise ConfigError(f"{where}: an object row needs the keys {expected}; it has {sorted(doc)}")
    elif label_column is not None:
        raise ConfigError(f"{where}: --label-column needs object rows; this row is a {type(doc).__name__}")
    if len(sig.inputs) != 1:
        raise ConfigError(f"{where}: the model has {len(sig.inputs)} inputs; give each row as an object keyed by them")
    return {sig.inputs[0].name: doc}, label


def read_rows(path: Path, sig: Signature, what: str = "validation data", label_column: str | None = None) -> Dataset:
    """The rows of ``path`` as one batch per input of ``sig``, typed and shaped as the signature says."""
    columns: dict[str, list[Any]] = {t.name: [] for t in sig.inputs}
    labels: list[Any] = []
    for lineno, doc in _lines(path, what):
        row, label = _row(doc, sig, f"{path}:{lineno}", label_column)
        for name, value in row.items():
            columns[name].append(value)
        labels.append(label)
    inputs = {}
    for spec in sig.inputs:
        try:
            arr = np.asarray(columns[spec.name], dtype=spec.dtype)
        except (ValueError, TypeError) as exc:
            raise ConfigError(
                f"{path}: input {spec.name!r} is not all {spec.datatype} values of one shape: {exc}"
            ) from None
        if not spec.shape_matches(arr.shape):
            got = arr.shape[1:] if arr.ndim else ()
            want = tuple(d if d >= 0 else "any" for d in spec.shape[1:])
            raise ConfigError(
                f"{path}: rows of {spec.name!r} have shape {list(got)}, the model takes {list(want)} "
                f"({spec.describe()}): mismatched features"
            )
        inputs[spec.name] = arr
    return Dataset(inputs, len(labels), tuple(labels) if label_column is not None else None)


def read_labels(path: Path, rows: int) -> tuple[Any, ...]:
    """One label per line (JSON values: class names, class indices or numbers), as many as the rows."""
    labels = tuple(doc for _, doc in _lines(path, "labels file"))
    if len(labels) != rows:
        raise ConfigError(f"{path} holds {len(labels)} labels for {rows} validation rows")
    return labels


def synthetic_rows(sig: Signature, rows: int, seed: int = 0) -> Dataset:
    """Standard-normal rows shaped like ``sig``'s inputs, for timing (and agreement) without a validation set."""
    rng = np.random.default_rng(seed)
    inputs = {}
    for spec in sig.inputs:
        if spec.dtype.kind not in "fiub":
            raise ConfigError(f"input {spec.name!r} is {spec.datatype}: give --validation rows to measure with")
        dims = tuple(d if d >= 0 else 1 for d in spec.shape[1:])
        inputs[spec.name] = rng.standard_normal((rows, *dims)).astype(spec.dtype)
    return Dataset(inputs, rows)


def take(data: Dataset, n: int) -> dict[str, npt.NDArray[Any]]:
    """``n`` rows of ``data``, cycling through it when it holds fewer (for a batch size larger than the file)."""
    index = np.arange(n) % data.rows
    return {name: arr[index] for name, arr in data.inputs.items()}
