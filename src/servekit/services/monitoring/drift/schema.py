"""Feature types and the conversion of any Arrow column to what a feature's summary needs.

A feature is *numerical* (SageMaker ``Integral`` or ``Fractional``) or *categorical* (``String``). Types are
inferred from the baseline's values, not its storage type: CSV and JSON give integers, floats and numeric
strings interchangeably, so a column whose present values all parse as numbers is numerical. Values are then
converted per batch, whatever Arrow type the batch happened to get, and the conversion reports which values
were missing (null, NaN, ±inf, empty string) and which had the wrong type (text where a number was expected,
a fraction in an ``Integral`` feature).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

# A number as CSV and JSON write it (no thousands separators, no "nan"/"inf": those are missing values).
_NUMBER_RE = r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$"


class Kind(enum.Enum):
    NUMERICAL = "numerical"
    CATEGORICAL = "categorical"


class InferredType(enum.Enum):
    """SageMaker Model Monitor's inferred types."""

    INTEGRAL = "Integral"
    FRACTIONAL = "Fractional"
    STRING = "String"
    UNKNOWN = "Unknown"

    @property
    def kind(self) -> Kind:
        return Kind.NUMERICAL if self in (InferredType.INTEGRAL, InferredType.FRACTIONAL) else Kind.CATEGORICAL


@dataclass(frozen=True, slots=True)
class Feature:
    name: str
    inferred_type: InferredType

    @property
    def kind(self) -> Kind:
        return self.inferred_type.kind


Column: TypeAlias = Any  # a pyarrow Array or ChunkedArray


@dataclass(frozen=True, slots=True)
class NumericColumn:
    """``values`` holds NaN where a value is missing or not a number; masks say which was which."""

    values: FloatArray
    missing: BoolArray
    mismatched: BoolArray


def _strings(col: Column) -> Column:
    return pc.utf8_trim_whitespace(pc.cast(col, pa.string()))


def to_numeric(col: Column, integral: bool = False) -> NumericColumn:
    """Any column as float64. Text that is not a number is ``mismatched`` (and NaN); so is a fraction when
    ``integral`` (but it keeps its value, so it is still binned)."""
    t = col.type
    if pa.types.is_null(t):
        n = len(col)
        return NumericColumn(np.full(n, np.nan), np.ones(n, dtype=bool), np.zeros(n, dtype=bool))
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t) or pa.types.is_boolean(t):
        values = _float_numpy(pc.cast(col, pa.float64()))
        not_number = np.zeros(len(values), dtype=bool)
    elif pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_dictionary(t):
        text = _strings(col)
        is_number = pc.fill_null(pc.match_substring_regex(text, _NUMBER_RE), False)
        empty = pc.fill_null(pc.equal(text, ""), True)
        values = _float_numpy(pc.cast(pc.if_else(is_number, text, pa.scalar(None, pa.string())), pa.float64()))
        not_number = ~(_bool_numpy(is_number) | _bool_numpy(empty))
    else:  # lists, structs, binary: nothing numeric about them
        n = len(col)
        nulls = _bool_numpy(pc.is_null(col))
        return NumericColumn(np.full(n, np.nan), nulls, ~nulls)
    finite = np.isfinite(values)
    missing = ~finite & ~not_number
    mismatched = not_number
    if integral:
        with np.errstate(invalid="ignore"):
            mismatched = mismatched | (finite & (values != np.floor(values)))
    return NumericColumn(values, missing, mismatched)


def to_categorical(col: Column) -> pa.Array:
    """Any column as a string array; missing values (null, NaN, empty or blank text) become null."""
    t = col.type
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if pa.types.is_null(t):
        return pa.nulls(len(col), pa.string())
    if pa.types.is_floating(t):
        col = pc.if_else(pc.is_finite(col), col, pa.scalar(None, t))
    if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)) and not (
        pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_boolean(t) or pa.types.is_dictionary(t)
    ):
        return pa.array([None if v is None else str(v) for v in col.to_pylist()], pa.string())
    text = _strings(col)
    out = pc.if_else(pc.equal(text, ""), pa.scalar(None, pa.string()), text)
    assert isinstance(out, pa.Array)
    return out


def infer_type(present: int, numeric: int, integral: int) -> InferredType:
    """From counts over the baseline: present values, those that parse as numbers, those that are integers."""
    if present == 0:
        return InferredType.UNKNOWN
    if numeric < present:
        return InferredType.STRING
    return InferredType.INTEGRAL if integral == present else InferredType.FRACTIONAL


def _float_numpy(arr: Any) -> FloatArray:
    return np.asarray(pc.fill_null(arr, float("nan")).to_numpy(zero_copy_only=False), dtype=float)


def _bool_numpy(arr: Any) -> BoolArray:
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=bool)
