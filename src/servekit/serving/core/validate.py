"""Check decoded inputs against a signature and cast them to its dtypes, with messages that teach."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from servekit.errors import ServekitError, invalid
from servekit.serving.schema import ONLY_INPUT
from servekit.types import Signature, TensorSpec


def _shape(s: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(d) for d in s) + "]"


def _fail(sig: Signature, message: str) -> ServekitError:
    return invalid(f"{message}; {sig.describe()}", expected=[t.describe() for t in sig.inputs])


def cast(value: npt.NDArray[Any], spec: TensorSpec, sig: Signature) -> npt.NDArray[Any]:
    want = spec.dtype
    have = value.dtype
    if have == want and want.kind != "O":
        return value
    if want.kind == "O":
        if have.kind in "USO":
            return value.astype(object) if have.kind != "O" else value
        raise _fail(sig, f"input '{spec.name}' must hold strings or bytes ({spec.datatype}), got numbers")
    if have.kind in "USO":
        if have.kind == "O":  # e.g. a list mixing numbers and None/strings, or integers too big for int64
            try:
                converted = value.astype(want)
            except OverflowError:
                raise _fail(sig, f"input '{spec.name}' holds a number too large for {spec.datatype}") from None
            except (TypeError, ValueError):
                pass
            else:
                return converted
        raise _fail(sig, f"input '{spec.name}' must be numeric ({spec.datatype}), got strings or mixed values")
    if have.kind not in "biuf":  # complex, datetime, structured (void) arrays, e.g. from a .npy body
        raise _fail(sig, f"input '{spec.name}' must be numeric ({spec.datatype}), got {have} values")
    if want.kind == "b":
        if have.kind != "b" and not np.all((value == 0) | (value == 1)):
            raise _fail(sig, f"input '{spec.name}' must hold booleans, got other numbers")
        return value.astype(np.bool_)
    if want.kind in "iu":
        if have.kind == "f" and (not np.all(np.isfinite(value)) or not np.all(np.mod(value, 1) == 0)):
            raise _fail(sig, f"input '{spec.name}' must hold integers ({spec.datatype}), got fractions")
        if have.kind in "iuf" and value.size and not np.can_cast(have, want):
            lo, hi = int(np.iinfo(want).min), int(np.iinfo(want).max)
            if value.min() < lo or value.max() >= hi + 1:  # hi + 1: float64 rounds 2**63 - 1 up
                raise _fail(sig, f"input '{spec.name}' holds values outside [{lo}, {hi}], the range of {spec.datatype}")
        return value.astype(want)
    try:
        with np.errstate(over="raise"):  # a finite value too large for the narrower float would become inf
            return value.astype(want)
    except FloatingPointError:
        raise _fail(sig, f"input '{spec.name}' holds values outside the range of {spec.datatype}") from None


def _non_finite(value: npt.NDArray[Any], spec: TensorSpec, sig: Signature) -> None:
    """Refuse NaN / Infinity the signature does not allow: the model would raise, and it is the data's fault."""
    if np.isfinite(value).all():
        return
    if not sig.allows_nan and np.isnan(value).any():
        raise _fail(sig, f"input '{spec.name}' holds NaN, which this model does not accept; send numbers")
    if not sig.allows_inf and np.isinf(value).any():
        raise _fail(sig, f"input '{spec.name}' holds Infinity, which this model does not accept; send finite numbers")


def validate_inputs(sig: Signature, given: Mapping[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
    if not sig.validate:
        if ONLY_INPUT in given and sig.inputs:
            return {sig.inputs[0].name: given[ONLY_INPUT]}
        return dict(given)
    if len(sig.inputs) == 1 and len(given) == 1:  # the common case, without building lookups
        spec = sig.inputs[0]
        ((name, value),) = given.items()
        if name in (ONLY_INPUT, spec.name):
            return {spec.name: _check(spec, value, sig)}
    expected = {t.name: t for t in sig.inputs}
    named = dict(given)
    if ONLY_INPUT in named:
        if len(sig.inputs) != 1:
            raise _fail(sig, f"this signature has {len(sig.inputs)} inputs, so each must be given by name")
        named = {sig.inputs[0].name: named.pop(ONLY_INPUT)}
    missing = [n for n in expected if n not in named]
    extra = [n for n in named if n not in expected]
    if missing or extra:
        parts = []
        if missing:
            parts.append("missing input(s) " + ", ".join(repr(n) for n in missing))
        if extra:
            parts.append("unexpected input(s) " + ", ".join(repr(n) for n in extra))
        raise _fail(sig, "; ".join(parts))
    return {name: _check(spec, named[name], sig) for name, spec in expected.items()}


def _check(spec: TensorSpec, value: npt.NDArray[Any], sig: Signature) -> npt.NDArray[Any]:
    if not spec.shape_matches(value.shape):
        raise _fail(sig, f"input '{spec.name}' has shape {_shape(value.shape)}, expected {_shape(spec.shape)}")
    if value.ndim and value.shape[0] == 0:
        raise _fail(sig, f"input '{spec.name}' is empty (0 rows)")
    out = cast(value, spec, sig)
    if out.dtype.kind == "f" and not (sig.allows_nan and sig.allows_inf):
        _non_finite(out, spec, sig)
    return out
