"""text/csv of a model with several outputs: a row per example, each output's values in turn (a multi-value output
flattened into consecutive columns), as the frameworks' containers write. It was a 406 before."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from servekit.errors import ErrorCode, ServekitError
from servekit.serving.codecs.sagemaker import CSV, encode_body
from servekit.serving.schema import InferenceResponse


def response(outputs: dict[str, npt.NDArray[Any]]) -> InferenceResponse:
    return InferenceResponse("m", 1, "serving_default", outputs)


def test_several_outputs_are_columns_in_the_models_order() -> None:
    outputs = {
        "label": np.array([0, 2], dtype=np.int64),
        "probabilities": np.array([[0.5, 0.25, 0.25], [0.125, 0.125, 0.75]]),
        "name": np.array([b"setosa", b"virginica"], dtype=object),
        "grid": np.arange(8).reshape(2, 2, 2),
    }
    body = encode_body(response(outputs), CSV, True)
    assert body == b"0,0.5,0.25,0.25,setosa,0,1,2,3\n2,0.125,0.125,0.75,virginica,4,5,6,7\n"


def test_one_output_is_written_as_before() -> None:
    assert encode_body(response({"y": np.array([[1.5, 2.0], [3.0, 4.0]])}), CSV, True) == b"1.5,2.0\n3.0,4.0\n"


def test_outputs_without_a_row_per_example_are_refused_by_name() -> None:
    with pytest.raises(ServekitError) as info:
        encode_body(response({"y": np.array([1.0, 2.0]), "total": np.array(3.0)}), CSV, True)
    assert info.value.code is ErrorCode.NOT_ACCEPTABLE
    assert "y [2], total []" in info.value.message and "application/json" in info.value.message
