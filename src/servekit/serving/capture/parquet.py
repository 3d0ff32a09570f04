"""servekit's Parquet capture layout (``--capture_format parquet``): one Parquet row per captured row, a column per
feature, in the same hourly partitions as the JSON Lines layout (``<part>/MM-SS-<pid>-<id>.parquet``).

Columns: ``eventTime`` (timestamp, µs, UTC), ``eventId``, ``inferenceId`` (the caller's, else null), ``eventRow``
/ ``eventRows`` (the row's index in its request / the request's rows), ``model``, ``modelVersion``, ``variant``
(an endpoint's, else null); the request's tensors as ``input.<name>`` (a [N] or [N, 1] tensor) or
``input.<name>[<j>]`` (column j of a [N, F] tensor: one column per feature); the answer's as ``output.<name>``
(a [N] tensor) or a list column (a [N, K] tensor, e.g. class probabilities). Bodies a model decoded itself
(``inference.py``), and tensors whose rows do not line up, are kept whole, one Parquet row per request:
``inputBody`` / ``outputBody`` (bytes; tensors as KServe V2 JSON) with ``inputContentType`` / ``outputContentType``.
The schema's metadata carries ``servekit.capture`` (the layout version), which is how readers tell a capture
file from other Parquet data.

pyarrow (the ``monitor`` extra) is imported only when this layout is used: a server started with it and without
pyarrow fails at startup (:func:`require_pyarrow`).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from servekit.errors import ConfigError
from servekit.serving.capture.record import tensors_body

METADATA_KEY = b"servekit.capture"
LAYOUT_VERSION = b"1"
INPUT = "input."
OUTPUT = "output."
BODY = "Body"  # inputBody / outputBody
CONTENT_TYPE = "ContentType"  # inputContentType / outputContentType
TENSOR_CONTENT_TYPE = "application/json"

Body = bytes | Mapping[str, npt.NDArray[Any]] | None


def require_pyarrow() -> None:
    if importlib.util.find_spec("pyarrow") is None:
        raise ConfigError("capture format parquet needs pyarrow: pip install 'servekit[monitor]' (or use jsonl)")


def _rows(tensors: Mapping[str, npt.NDArray[Any]]) -> int | None:
    """The common first dimension of the tensors, or None when they do not share one."""
    firsts = {np.asarray(a).shape[0] if np.asarray(a).ndim else -1 for a in tensors.values()}
    if len(firsts) != 1:
        return None
    (n,) = firsts
    return n if n >= 1 else None


def _column(arr: npt.NDArray[Any]) -> Any:
    import pyarrow as pa  # type: ignore[import-untyped]

    if arr.dtype.kind in "OSU":
        return pa.array([v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v) for v in arr.tolist()])
    return pa.array(arr)


class ParquetBuffer:
    """The rows of one open capture file, written as one Parquet file when the file is closed."""

    def __init__(self, variant: str | None = None) -> None:
        self._variant = variant
        self._tables: list[Any] = []
        self.rows = 0

    def add(
        self,
        when: datetime,
        event_id: str,
        inference_id: str | None,
        model: str,
        version: int,
        input_type: str | None,
        input_body: Body,
        output_type: str | None,
        output_body: Body,
    ) -> None:
        import pyarrow as pa

        tensors_in = input_body if isinstance(input_body, Mapping) else None
        tensors_out = output_body if isinstance(output_body, Mapping) else None
        n = _rows({**(tensors_in or {}), **(tensors_out or {})}) if tensors_in or tensors_out else None
        whole = (
            n is None
            or (input_body is not None and tensors_in is None)
            or (output_body is not None and not tensors_out)
        )
        rows = 1 if whole or n is None else n
        cols: dict[str, Any] = {
            "eventTime": pa.array([when] * rows, pa.timestamp("us", tz="UTC")),
            "eventId": pa.array([event_id] * rows, pa.string()),
            "inferenceId": pa.array([inference_id] * rows, pa.string()),
            "eventRow": pa.array(np.arange(rows, dtype=np.int32)),
            "eventRows": pa.array(np.full(rows, rows, dtype=np.int32)),
            "model": pa.array([model] * rows, pa.string()),
            "modelVersion": pa.array([version] * rows, pa.int64()),
            "variant": pa.array([self._variant] * rows, pa.string()),
        }
        for side, prefix, ctype, body in (
            ("input", INPUT, input_type, input_body),
            ("output", OUTPUT, output_type, output_body),
        ):
            if body is None:
                continue
            if whole:
                raw = tensors_body(f"{side}s", body) if isinstance(body, Mapping) else body
                cols[f"{side}{BODY}"] = pa.array([raw], pa.binary())
                media = TENSOR_CONTENT_TYPE if isinstance(body, Mapping) else ctype
                cols[f"{side}{CONTENT_TYPE}"] = pa.array([media], pa.string())
                continue
            assert isinstance(body, Mapping)
            for name, value in body.items():
                arr = np.asarray(value)
                flat = arr.reshape(rows, -1) if arr.ndim > 1 else arr.reshape(rows, 1)
                if flat.shape[1] == 1:
                    cols[f"{prefix}{name}"] = _column(flat[:, 0])
                elif side == "input" and arr.ndim == 2:  # a column per feature
                    for j in range(flat.shape[1]):
                        cols[f"{prefix}{name}[{j}]"] = _column(flat[:, j])
                else:
                    width = flat.shape[1]
                    values = _column(np.ascontiguousarray(flat).ravel())
                    cols[f"{prefix}{name}"] = pa.FixedSizeListArray.from_arrays(values, width)
        self._tables.append(pa.table(cols))
        self.rows += rows

    def write(self, path: Path) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq  # type: ignore[import-untyped]

        table = pa.concat_tables(self._tables, promote_options="permissive")
        table = table.replace_schema_metadata({METADATA_KEY: LAYOUT_VERSION})
        pq.write_table(table, path, compression="zstd")
        self._tables = []
