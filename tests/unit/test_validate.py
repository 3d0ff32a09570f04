import numpy as np
import pytest

from servekit.errors import ErrorCode, ServekitError
from servekit.inference.schema import ONLY_INPUT
from servekit.inference.validate import validate_inputs
from servekit.types import Signature, TensorSpec

SIG = Signature(
    "serving_default",
    (TensorSpec("x", "FP32", (-1, 3)), TensorSpec("ids", "INT64", (-1,)), TensorSpec("s", "BYTES", (-1,))),
    (TensorSpec("y", "FP32", (-1,)),),
)
ONE = Signature("serving_default", (TensorSpec("x", "FP32", (-1, 2)),), (TensorSpec("y", "FP32", (-1,)),))


def good() -> dict[str, np.ndarray]:
    return {"x": np.ones((2, 3)), "ids": np.array([1, 2]), "s": np.array(["a", "b"])}


def test_casts_to_signature_dtypes() -> None:
    out = validate_inputs(SIG, good())
    assert out["x"].dtype == np.float32
    assert out["ids"].dtype == np.int64
    assert out["s"].dtype == object


def test_integral_floats_become_ints() -> None:
    inputs = {**good(), "ids": np.array([1.0, 2.0])}
    assert validate_inputs(SIG, inputs)["ids"].tolist() == [1, 2]


def test_only_input_maps_to_the_single_input() -> None:
    assert set(validate_inputs(ONE, {ONLY_INPUT: np.ones((1, 2))})) == {"x"}


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"x": np.ones((2, 4))}, "input 'x' has shape [2, 4], expected [-1, 3]"),
        ({"x": np.ones(3)}, "input 'x' has shape [3], expected [-1, 3]"),
        ({"ids": np.array([1.5, 2.0])}, "must hold integers"),
        ({"x": np.array([["a", "b", "c"]])}, "must be numeric"),
        ({"s": np.array([1, 2])}, "must hold strings or bytes"),
        ({"x": np.ones((0, 3))}, "is empty"),
        ({"extra": np.ones(1)}, "unexpected input(s) 'extra'"),
    ],
)
def test_rejections_state_the_signature(change: dict[str, np.ndarray], fragment: str) -> None:
    with pytest.raises(ServekitError) as info:
        validate_inputs(SIG, {**good(), **change})
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    assert fragment in info.value.message
    assert "x: FP32[-1,3]" in info.value.message  # the expected signature is always spelled out


def test_missing_input() -> None:
    inputs = good()
    del inputs["ids"]
    with pytest.raises(ServekitError, match="missing input"):
        validate_inputs(SIG, inputs)


def test_unnamed_input_for_multi_input_signature() -> None:
    with pytest.raises(ServekitError, match="has 3 inputs, so each must be given by name"):
        validate_inputs(SIG, {ONLY_INPUT: np.ones((1, 3))})


def test_unvalidated_signature_passes_through() -> None:
    sig = Signature("d", (TensorSpec("inputs", "FP64", (-1, -1)),), (), validate=False)
    arr = np.array([["a", 1]], dtype=object)
    assert validate_inputs(sig, {ONLY_INPUT: arr})["inputs"] is arr
