"""Request bodies as ``xgboost.DMatrix``, as SageMaker's XGBoost container's ``encoder`` reads them for an
inference script's ``input_fn``: CSV rows of features, libsvm lines (their label ignored), RecordIO-protobuf."""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from servekit.services.training.algorithms.xgboost_algorithm import libsvm
from servekit.serving.codecs import recordio_protobuf


def _text(string_like: str | bytes) -> str:
    return string_like.decode("utf-8") if isinstance(string_like, bytes) else string_like


def csv_to_dmatrix(string_like: str | bytes, dtype: Any = None) -> Any:
    import xgboost as xgb

    rows = np.loadtxt(io.StringIO(_text(string_like).strip()), delimiter=",", ndmin=2, dtype=dtype or np.float64)
    return xgb.DMatrix(rows)


def libsvm_to_dmatrix(string_like: str | bytes) -> Any:
    import xgboost as xgb

    matrix, _labels = libsvm([("request", _text(string_like))])
    return xgb.DMatrix(matrix)


def recordio_protobuf_to_dmatrix(string_like: bytes) -> Any:
    import xgboost as xgb

    return xgb.DMatrix(recordio_protobuf.read(string_like)[0])


_DECODERS = {
    "text/csv": csv_to_dmatrix,
    "text/libsvm": libsvm_to_dmatrix,
    "text/x-libsvm": libsvm_to_dmatrix,
    recordio_protobuf.CONTENT_TYPE: recordio_protobuf_to_dmatrix,
}


def decode(obj: Any, content_type: str) -> Any:
    """``obj`` as a DMatrix, by its content type."""
    decoder = _DECODERS.get(content_type.split(";")[0].strip().lower())
    if decoder is None:
        raise ValueError(f"Content type {content_type} is not supported: use {', '.join(_DECODERS)}")
    return decoder(obj)
