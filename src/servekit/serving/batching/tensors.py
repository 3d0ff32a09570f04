"""Concatenate, pad and split named tensors along dimension 0 (numpy only)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

Tensors = Mapping[str, npt.NDArray[Any]]


def rows_of(tensors: Tensors) -> int:
    """The batch size of a request: dim 0 of its inputs (they must agree)."""
    sizes = {a.shape[0] if a.ndim else 1 for a in tensors.values()}
    if len(sizes) != 1:
        raise ValueError(f"inputs disagree on the batch dimension: {sorted(sizes)}")
    return sizes.pop()


def concat(parts: Sequence[Tensors]) -> dict[str, npt.NDArray[Any]]:
    if len(parts) == 1:
        return dict(parts[0])
    return {name: np.concatenate([p[name] for p in parts], axis=0) for name in parts[0]}


def slice_rows(tensors: Tensors, start: int, stop: int) -> dict[str, npt.NDArray[Any]]:
    return {name: a[start:stop] for name, a in tensors.items()}


def pad_to(tensors: Tensors, rows: int, target: int) -> dict[str, npt.NDArray[Any]]:
    """Pad dim 0 from ``rows`` up to ``target`` by repeating the last row (always a valid input)."""
    if target == rows:
        return dict(tensors)
    return {name: np.concatenate([a, np.repeat(a[-1:], target - rows, axis=0)], axis=0) for name, a in tensors.items()}


def padded_size(rows: int, allowed: Sequence[int]) -> int:
    """The smallest allowed batch size holding ``rows`` (``rows`` itself when no sizes are given)."""
    for size in allowed:
        if size >= rows:
            return size
    return rows


def split(outputs: Tensors, counts: Sequence[int], batch_rows: int) -> list[dict[str, npt.NDArray[Any]]]:
    """Cut each output back into per-request pieces; padding rows past sum(counts) are dropped.

    An output whose dim 0 is not the batch size (a per-batch value) cannot be split and is an error.
    """
    for name, a in outputs.items():
        if a.ndim == 0 or a.shape[0] != batch_rows:
            shape = list(a.shape)
            raise ValueError(f"output '{name}' has shape {shape}; a batched model must return {batch_rows} rows")
    if len(counts) == 1 and counts[0] == batch_rows:
        return [dict(outputs)]
    pieces = []
    start = 0
    for n in counts:
        pieces.append({name: a[start : start + n] for name, a in outputs.items()})
        start += n
    return pieces
