"""Reading capture files of either layout as batches of rows: what the monitor reads (it decodes nothing itself).

Layouts: SageMaker's JSON Lines (the default) and servekit's Parquet layout (``--capture_format parquet``; see
``capture.parquet``). Either way a batch carries, per row, its inference time, its join key for ground truth and
one side of the exchange as an Arrow table: the request's features (``side="input"``) or the model's answer
(``side="output"``). A [N, F] tensor (or a list row) gives positional columns, named from ``columns`` and then
``_c<i>``; several tensors (or object rows) give one column per name; a wider tensor among several, such as class
probabilities, gives a list column.

**Join keys.** A record's key is its ``inferenceId`` (the caller's ``X-Amzn-SageMaker-Inference-Id``) when it has
one, else its ``eventId``. A request that carried several rows is keyed row by row as ``<key>:<i>`` (0-based), so
each row can have a label of its own.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, Literal

import numpy as np
import numpy.typing as npt
import orjson
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from servekit.serving.capture.decode import Row, UndecodableRecord, body_rows, inference_time, payload_rows
from servekit.serving.capture.parquet import BODY, CONTENT_TYPE, INPUT, METADATA_KEY, OUTPUT
from servekit.storage import ObjectStorage

Side = Literal["input", "output"]
FloatArray = npt.NDArray[np.float64]
_POSITIONAL_RE = re.compile(r"^(.*)\[(\d+)\]$")


@dataclass(frozen=True, slots=True)
class CaptureBatch:
    table: pa.Table  # the side's columns, one row per captured row
    times: FloatArray  # epoch seconds per row
    keys: list[str]  # ground-truth join key per row (see the module docstring)


@dataclass(slots=True)
class CaptureStats:
    undecodable_records: int = 0
    errors: list[str] = field(default_factory=list)  # the first 20 problems, each naming its file

    def bad(self, path: str, problem: object) -> None:
        self.undecodable_records += 1
        if len(self.errors) < 20:
            self.errors.append(f"{path}: {problem}")


def capture_layout(storage: ObjectStorage, path: str) -> str | None:
    """``"jsonl"`` or ``"parquet"`` for a capture file, None for any other file."""
    name = path.lower().removesuffix(".gz")
    if name.endswith((".jsonl", ".json", ".ndjson")):
        with _open(storage, path) as f:
            first = next((line for line in f if line.strip()), b"")
        return "jsonl" if b'"captureData"' in first else None
    if name.endswith((".parquet", ".pq")):
        with _open(storage, path) as f:
            try:
                meta = pq.read_schema(f).metadata or {}
            except pa.ArrowInvalid:
                return None
        return "parquet" if METADATA_KEY in meta else None
    return None


def read_capture_file(
    storage: ObjectStorage,
    path: str,
    layout: str,
    *,
    side: Side = "input",
    columns: Sequence[str] = (),
    batch_rows: int = 65536,
    stats: CaptureStats | None = None,
) -> Iterator[CaptureBatch]:
    stats = stats if stats is not None else CaptureStats()
    if layout == "parquet":
        yield from _read_parquet(storage, path, side, columns, batch_rows, stats)
    else:
        yield from _read_jsonl(storage, path, side, columns, batch_rows, stats)


def _open(storage: ObjectStorage, path: str) -> IO[bytes]:
    return storage.open(path, "rb", compression="gzip" if path.lower().endswith(".gz") else None)


def _record_key(meta: Any) -> str:
    key = meta.get("inferenceId") or meta.get("eventId")
    return str(key) if key is not None else ""


def _keys(key: str, n: int) -> list[str]:
    return [key] if n == 1 else [f"{key}:{i}" for i in range(n)]


def _read_jsonl(
    storage: ObjectStorage, path: str, side: Side, columns: Sequence[str], batch_rows: int, stats: CaptureStats
) -> Iterator[CaptureBatch]:
    field_name = "endpointInput" if side == "input" else "endpointOutput"
    rows: list[Row] = []
    times: list[float] = []
    keys: list[str] = []
    with _open(storage, path) as f:
        for line in f:
            if not line.strip():
                continue
            try:
                record = orjson.loads(line)
                meta = record["eventMetadata"]
                when = inference_time(meta["inferenceTime"])
                payload = record["captureData"].get(field_name)
                if payload is None:
                    continue
                if not isinstance(payload, dict):
                    raise UndecodableRecord(f"{field_name} must be an object")
                new = payload_rows(payload)
            except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError, ValueError) as exc:
                stats.bad(path, exc if isinstance(exc, UndecodableRecord) else f"not a capture record: {exc}")
                continue
            rows.extend(new)
            times.extend([when] * len(new))
            keys.extend(_keys(_record_key(meta), len(new)))
            if len(rows) >= batch_rows:
                yield CaptureBatch(rows_to_table(rows, columns), np.array(times, dtype=float), keys)
                rows, times, keys = [], [], []
    if rows:
        yield CaptureBatch(rows_to_table(rows, columns), np.array(times, dtype=float), keys)


def _read_parquet(
    storage: ObjectStorage, path: str, side: Side, columns: Sequence[str], batch_rows: int, stats: CaptureStats
) -> Iterator[CaptureBatch]:
    prefix = INPUT if side == "input" else OUTPUT
    body, ctype = f"{side}{BODY}", f"{side}{CONTENT_TYPE}"
    with _open(storage, path) as f:
        try:
            parquet = pq.ParquetFile(f, pre_buffer=False, buffer_size=1 << 20)
        except pa.ArrowInvalid as exc:
            stats.bad(path, f"not a readable Parquet file ({exc})")
            return
        names = parquet.schema_arrow.names
        wanted = [n for n in names if n.startswith(prefix) or n in (body, ctype)]
        meta_cols = [n for n in ("eventTime", "eventId", "inferenceId", "eventRow", "eventRows") if n in names]
        for rb in parquet.iter_batches(batch_size=batch_rows, columns=[*meta_cols, *wanted]):
            table = pa.Table.from_batches([rb])
            yield from _parquet_batch(table, prefix, body, ctype, columns, path, stats)


def _parquet_batch(
    table: pa.Table, prefix: str, body: str, ctype: str, columns: Sequence[str], path: str, stats: CaptureStats
) -> Iterator[CaptureBatch]:
    micros = pc.cast(pc.cast(table.column("eventTime"), pa.timestamp("us", tz="UTC")), pa.int64())
    times = np.asarray(pc.fill_null(micros, 0).to_numpy(zero_copy_only=False), dtype=float) / 1e6
    ids = pc.coalesce(table.column("inferenceId"), table.column("eventId")).to_pylist()
    row = table.column("eventRow").to_pylist()
    count = table.column("eventRows").to_pylist()
    has_body = body in table.column_names and table.column(body).null_count < table.num_rows
    tensor_mask = pc.is_null(table.column(body)) if has_body else None
    tensors = table if tensor_mask is None else table.filter(tensor_mask)
    if tensors.num_rows:
        keep = np.flatnonzero(np.asarray(tensor_mask)) if tensor_mask is not None else np.arange(table.num_rows)
        keys = [str(ids[i]) if (count[i] or 1) == 1 else f"{ids[i]}:{row[i]}" for i in keep.tolist()]
        side_table = _tensor_columns(tensors, prefix, columns)
        if side_table.num_columns:  # else the rows lack this side (an input-only capture read for outputs)
            yield CaptureBatch(side_table, times[keep], keys)
    if has_body:  # bodies a model decoded itself: decoded here, as in the JSON Lines layout
        rows: list[Row] = []
        out_times: list[float] = []
        out_keys: list[str] = []
        bodies = table.column(body).to_pylist()
        types = table.column(ctype).to_pylist() if ctype in table.column_names else [""] * table.num_rows
        for i, raw in enumerate(bodies):
            if raw is None:
                continue
            try:
                new = body_rows(raw, types[i] or "")
            except UndecodableRecord as exc:
                stats.bad(path, exc)
                continue
            rows.extend(new)
            out_times.extend([float(times[i])] * len(new))
            out_keys.extend(_keys(str(ids[i]), len(new)))
        if rows:
            yield CaptureBatch(rows_to_table(rows, columns), np.array(out_times, dtype=float), out_keys)


def _tensor_columns(table: pa.Table, prefix: str, columns: Sequence[str]) -> pa.Table:
    """``input.<name>`` columns as ``<name>``; ``input.<name>[<j>]`` (a [N, F] tensor's j-th column) as the j-th
    positional column when it is the only tensor, else as ``<name>[<j>]``."""
    own = [n for n in table.column_names if n.startswith(prefix)]
    present = [n for n in own if table.column(n).null_count < table.num_rows]
    matches = [_POSITIONAL_RE.match(n[len(prefix) :]) for n in present]
    positional = all(matches) and len({m.group(1) for m in matches if m}) == 1
    out: dict[str, pa.ChunkedArray] = {}
    for n in present:
        name = n[len(prefix) :]
        m = _POSITIONAL_RE.match(name)
        if positional and m:
            j = int(m.group(2))
            name = columns[j] if j < len(columns) else f"_c{j}"
        out[name] = table.column(n)
    return pa.table(out) if out else pa.table({})


def rows_to_table(rows: Sequence[Row], columns: Sequence[str]) -> pa.Table:
    """Rows as a table: object rows by key, list rows by position (named from ``columns``, then ``_c<i>``)."""
    if all(isinstance(r, list) for r in rows):
        width = max((len(r) for r in rows), default=0)
        names = [columns[i] if i < len(columns) else f"_c{i}" for i in range(width)]
        values = list(itertools.zip_longest(*rows)) if rows else []
        return pa.table({n: _arrow(list(v)) for n, v in zip(names, values, strict=True)})
    dict_rows = [r if isinstance(r, dict) else _named(r, columns) for r in rows]
    keys = list(dict.fromkeys(k for r in dict_rows for k in r))
    return pa.table({k: _arrow([r.get(k) for r in dict_rows]) for k in keys})


def _named(row: list[Any], columns: Sequence[str]) -> dict[str, Any]:
    return {columns[i] if i < len(columns) else f"_c{i}": v for i, v in enumerate(row)}


def _arrow(values: list[Any]) -> pa.Array:
    """Arrow's own type inference; a column of mixed types becomes text (then checked per feature)."""
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        return pa.array([None if v is None else v if isinstance(v, str) else _text(v) for v in values], pa.string())


def _text(v: Any) -> str:
    if isinstance(v, list | dict):
        return orjson.dumps(v).decode()
    return str(v)
