"""The row-format fast path writes exactly the bytes of the general encoder (a dict per row, orjson), on random
shapes, dtypes, NaN/Infinity and output names; outputs it does not take fall back with the same answer."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from servekit.errors import ServekitError
from servekit.serving.codecs.json import dumps
from servekit.serving.codecs.tfjson import array_rows, encode_predict, encode_response, encode_rows_fast
from servekit.serving.schema import InferenceResponse
from servekit.types import PREDICT_METHOD

DTYPES = [
    np.float32, np.float64, np.float16, np.int8, np.int16, np.int32, np.int64,
    np.uint8, np.uint16, np.uint32, np.uint64, np.bool_, np.dtype(">f4"), np.dtype(">i8"),
]  # fmt: skip
NAMES = st.text(st.characters(codec="utf-8"), min_size=1, max_size=6) | st.sampled_from(["y", "label", "p%s", 'a"b'])


@st.composite
def outputs(draw: st.DrawFn) -> dict[str, npt.NDArray[Any]]:
    rows = draw(st.integers(1, 40))
    names = draw(st.lists(NAMES, min_size=2, max_size=4, unique=True))
    out: dict[str, npt.NDArray[Any]] = {}
    for name in names:
        dtype = np.dtype(draw(st.sampled_from(DTYPES)))
        tail = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
        elements = (
            st.floats(width=dtype.itemsize * 8, allow_nan=True, allow_infinity=True) if dtype.kind == "f" else None
        )
        out[name] = draw(hnp.arrays(dtype, (rows, *tail), elements=elements))
    return out


def general(outs: dict[str, npt.NDArray[Any]]) -> bytes:
    return dumps(encode_predict(InferenceResponse("m", 1, "s", outs), True))


def outcome(fn: Any, outs: dict[str, npt.NDArray[Any]]) -> bytes | str:
    """The bytes written, or the error raised (type and message): the general path refuses some arrays."""
    try:
        return fn(outs)  # type: ignore[no-any-return]
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def fast(outs: dict[str, npt.NDArray[Any]]) -> bytes:
    return encode_response(InferenceResponse("m", 1, "s", outs), PREDICT_METHOD, True)


@settings(max_examples=400, deadline=None)
@given(outputs())
def test_row_format_is_byte_identical(outs: dict[str, npt.NDArray[Any]]) -> None:
    assert outcome(fast, outs) == outcome(general, outs)


@settings(max_examples=200, deadline=None)
@given(
    hnp.arrays(st.sampled_from([np.float32, np.float64, np.int64, np.bool_]), hnp.array_shapes(min_dims=1, max_dims=4))
)
def test_array_rows_cuts_an_array_into_its_rows(arr: npt.NDArray[Any]) -> None:
    if arr.shape[0] == 0 or 0 in arr.shape[1:]:
        return
    rows = array_rows(orjson.dumps(arr, option=orjson.OPT_SERIALIZE_NUMPY), arr.ndim)
    assert rows == [orjson.dumps(row, option=orjson.OPT_SERIALIZE_NUMPY) for row in arr]


def test_outputs_the_fast_path_does_not_take_answer_as_before() -> None:
    f = np.array([[1.5, np.nan]] * 4, dtype=np.float32)
    cases: list[dict[str, npt.NDArray[Any]]] = [
        {"label": np.array(["cat"] * 4), "p": f},  # strings
        {"a": np.zeros((4, 0), dtype=np.float32), "p": f},  # an empty inner dimension
        {"a": np.asfortranarray(np.ones((4, 3), dtype=np.float32)), "p": f},  # not C-contiguous
        {"h": np.ones(4, dtype=np.float16), "p": f},  # float16
        {"\ud800": np.ones(4), "p": f},  # a name orjson cannot write as it is
        {"b": np.ones(4, dtype=">f4"), "p": f},  # foreign byte order (orjson refuses it either way)
        {"a": np.ones(3, dtype=np.float32), "p": f[:3]},  # too few rows to gain from the fast path
    ]
    for outs in cases:
        assert encode_rows_fast(outs) is None
        assert outcome(fast, outs) == outcome(general, outs)


def test_outputs_of_different_lengths_are_refused_as_before() -> None:
    outs = {"a": np.ones(2, dtype=np.float32), "b": np.ones(3, dtype=np.float32)}
    assert encode_rows_fast(outs) is None
    with pytest.raises(ServekitError, match="different batch sizes"):
        encode_response(InferenceResponse("m", 1, "s", outs), PREDICT_METHOD, True)
