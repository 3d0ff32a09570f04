import numpy as np
import pytest

from servekit.errors import ErrorCode, ServekitError
from servekit.serving.core.validate import validate_inputs
from servekit.serving.schema import ONLY_INPUT
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


# ---- hardening: values the signature's dtype cannot hold, and NaN/Infinity a model refuses --------------


def _one(datatype: str, *, allows_nan: bool = True, allows_inf: bool = True) -> Signature:
    spec = (TensorSpec("x", datatype, (-1,)),)
    return Signature("s", spec, (TensorSpec("y", "FP32", (-1,)),), allows_nan=allows_nan, allows_inf=allows_inf)


@pytest.mark.parametrize(
    ("datatype", "value", "fragment"),
    [
        ("FP32", np.array([10**400, 1], dtype=object), "input 'x' holds a number too large for FP32"),
        ("INT64", np.array([2**64, 1], dtype=object), "input 'x' holds a number too large for INT64"),
        ("FP32", np.array([1e300, 1.0]), "input 'x' holds values outside the range of FP32"),
        ("FP16", np.array([70000, 1]), "input 'x' holds values outside the range of FP16"),
        ("INT8", np.array([300, 1]), "holds values outside [-128, 127], the range of INT8"),
        ("UINT8", np.array([-1.0, 1.0]), "holds values outside [0, 255], the range of UINT8"),
        ("INT64", np.array([1e30, 1.0]), "the range of INT64"),
        ("UINT64", np.array([-1, 1]), "holds values outside [0, 18446744073709551615]"),
        ("FP32", np.array([1 + 2j, 1]), "must be numeric (FP32), got complex128 values"),
        ("FP64", np.zeros(2, dtype="V8"), "must be numeric (FP64), got |V8 values"),
    ],
)
def test_values_the_dtype_cannot_hold(datatype: str, value: np.ndarray, fragment: str) -> None:
    with pytest.raises(ServekitError) as info:
        validate_inputs(_one(datatype), {"x": value})
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    assert fragment in info.value.message


def test_casts_that_fit_still_pass() -> None:
    assert validate_inputs(_one("INT8"), {"x": np.array([-128, 127])})["x"].tolist() == [-128, 127]
    assert validate_inputs(_one("UINT64"), {"x": np.array([2**63], dtype=np.uint64)})["x"].dtype == np.uint64
    out = validate_inputs(_one("FP32"), {"x": np.array([3.4e38, np.inf, np.nan])})["x"]
    assert out.dtype == np.float32
    assert out[0] == np.float32(3.4e38)
    assert np.isinf(out[1])  # infinity was sent, not made by the cast: passed on
    assert validate_inputs(_one("FP64"), {"x": np.array([10**20, 1], dtype=object)})["x"].tolist() == [1e20, 1.0]


def test_non_finite_values_are_allowed_by_default() -> None:
    x = np.array([np.nan, np.inf, -np.inf, 1.0])
    assert np.isnan(validate_inputs(_one("FP64"), {"x": x})["x"][0])


@pytest.mark.parametrize(
    ("flags", "value", "fragment"),
    [
        ({"allows_nan": False}, [1.0, np.nan], "input 'x' holds NaN, which this model does not accept"),
        ({"allows_inf": False}, [1.0, -np.inf], "input 'x' holds Infinity, which this model does not accept"),
        ({"allows_nan": False, "allows_inf": False}, [np.inf, 1.0], "holds Infinity"),
        ({"allows_nan": False, "allows_inf": False}, [np.nan, np.inf], "holds NaN"),
    ],
)
def test_non_finite_values_the_signature_refuses(flags: dict[str, bool], value: list[float], fragment: str) -> None:
    with pytest.raises(ServekitError) as info:
        validate_inputs(
            _one("FP64", allows_nan=flags.get("allows_nan", True), allows_inf=flags.get("allows_inf", True)),
            {"x": np.array(value)},
        )
    assert info.value.code is ErrorCode.INVALID_ARGUMENT
    assert fragment in info.value.message
    assert "x: FP64[-1]" in info.value.message


def test_a_signature_refusing_only_infinity_takes_nan() -> None:
    out = validate_inputs(_one("FP32", allows_inf=False), {"x": np.array([np.nan, 1.0])})["x"]
    assert np.isnan(out[0])
    assert validate_inputs(_one("INT64", allows_nan=False), {"x": np.array([1, 2])})["x"].tolist() == [1, 2]


def test_sklearn_runtime_asks_the_estimator_which_non_finite_values_it_takes() -> None:
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline

    from servekit.serving.runtime.manifest import Manifest
    from servekit.serving.runtime.sklearn import SklearnServable

    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 3))
    y = (x[:, 0] > 0).astype(int)
    cases = {
        "plain": (LogisticRegression().fit(x, y), False, False),
        "imputing pipeline": (make_pipeline(SimpleImputer(), LogisticRegression()).fit(x, y), True, False),
        "native missing values": (HistGradientBoostingClassifier(max_iter=5).fit(x, y), True, True),
    }
    for what, (est, nan, inf) in cases.items():
        sigs = SklearnServable(est, Manifest()).signatures
        assert {(s.allows_nan, s.allows_inf) for s in sigs.values()} == {(nan, inf)}, what
        row = {ONLY_INPUT: np.array([[np.nan, 1.0, 1.0]])}
        if nan:
            assert validate_inputs(sigs["serving_default"], row)["inputs"].shape == (1, 3)
        else:
            with pytest.raises(ServekitError, match="holds NaN"):
                validate_inputs(sigs["serving_default"], row)
