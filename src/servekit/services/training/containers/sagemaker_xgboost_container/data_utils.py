"""``get_dmatrix`` as SageMaker's XGBoost container has it: a channel's files (or one file) as an ``xgboost.DMatrix``,
read as CSV (the label first, then the weight with ``csv_weights=1``), libsvm, Parquet (the label first) or
RecordIO-protobuf; None when the path holds no data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from servekit.services.training.algorithms.xgboost_algorithm import libsvm
from servekit.serving.codecs import recordio_protobuf

CSV = ("csv", "text/csv")
LIBSVM = ("libsvm", "text/libsvm", "text/x-libsvm")
PARQUET = ("parquet", "application/x-parquet")
RECORDIO = ("recordio-protobuf", recordio_protobuf.CONTENT_TYPE)


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))


def get_dmatrix(data_path: str | Path, content_type: str, csv_weights: int = 0, is_pipe: bool = False) -> Any:
    import xgboost as xgb

    if is_pipe:
        raise ValueError("Pipe mode is not supported by servekit: use TrainingInputMode File")
    files = _files(Path(data_path))
    if not files:
        return None
    kind = content_type.split(";")[0].strip().lower()
    if kind in CSV:
        data = np.vstack([np.loadtxt(f, delimiter=",", ndmin=2) for f in files])
        first = 2 if csv_weights else 1
        weights = data[:, 1] if csv_weights else None
        return xgb.DMatrix(data[:, first:], label=data[:, 0], weight=weights)
    if kind in LIBSVM:
        matrix, labels = libsvm((f.name, f.read_text()) for f in files)
        return xgb.DMatrix(matrix, label=labels)
    if kind in PARQUET:
        import pyarrow.parquet as pq  # type: ignore[import-untyped]

        table = np.vstack([np.column_stack([c.to_numpy() for c in pq.read_table(f).columns]) for f in files])
        return xgb.DMatrix(table[:, 1:], label=table[:, 0])
    if kind in RECORDIO:
        blocks = [recordio_protobuf.read(f.read_bytes()) for f in files]
        x = np.vstack([b[0] for b in blocks])
        labels = [b[1] for b in blocks]
        return xgb.DMatrix(x, label=np.concatenate(labels) if all(y is not None for y in labels) else None)
    raise ValueError(f"Content type {content_type} is not supported: use csv, libsvm, parquet or recordio-protobuf")
