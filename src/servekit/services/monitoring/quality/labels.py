"""Ground truth for model quality: a label store that ingests label files once each and joins them to captured
predictions by key.

``servekit monitor labels --data labels.csv|jsonl|parquet|DIR --id-column inference_id [--label-column label]
--store STORE`` appends the labels of every file not yet ingested to ``STORE/labels/<n>-<id>.parquet`` (columns
``id``, ``label``: canonical text, see :func:`canonical`) and records the file in ``STORE/ingested.json`` (its
size and modification time): running it again on a folder that keeps receiving files ingests only the new ones;
a file that changed since is ingested again. SageMaker's ground-truth records (``{"groundTruthData": {"data": …},
"eventMetadata": {"eventId": …}}``) are read as they are, without ``--id-column``. When an id has several labels
the one ingested last counts. Labels may arrive long after the predictions: a quality run uses every label the
store holds when it runs. Ingestion takes ``STORE/.lock`` so two runs never ingest one file twice.
"""

from __future__ import annotations

import fcntl
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from servekit.services.monitoring.baseline.store import dump, write_atomic
from servekit.services.monitoring.stream.sources import SourceError, list_files, read
from servekit.storage import ObjectStorage, Storage

LABELS_DIR = "labels"
INGESTED = "ingested.json"


class LabelError(ValueError):
    """A label file lacks the named columns, or the store cannot be read."""


@dataclass(frozen=True, slots=True)
class IngestReport:
    files: int  # ingested now
    rows: int
    skipped: int  # already ingested, unchanged


def canonical(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Labels and predicted classes as comparable text: numbers (or text that parses as one) as ``1`` / ``0.25``
    (an integral value has no decimals, so ``1``, ``1.0`` and ``"1"`` are one class), other text stripped,
    booleans ``true``/``false``, missing values null."""
    arr = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    t = arr.type
    if pa.types.is_boolean(t):
        return pc.if_else(arr, "true", "false")
    if pa.types.is_integer(t):
        return pc.cast(arr, pa.string())
    if pa.types.is_floating(t):
        return _numbers(np.asarray(pc.fill_null(pc.cast(arr, pa.float64()), np.nan)), arr.is_null())
    text = pc.utf8_trim_whitespace(pc.cast(arr, pa.string()))
    text = pc.if_else(pc.equal(text, ""), pa.scalar(None, pa.string()), text)
    try:
        as_float = pc.cast(text, pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return text
    return _numbers(np.asarray(pc.fill_null(as_float, np.nan)), pc.is_null(text))


def _numbers(x: np.ndarray[Any, np.dtype[np.float64]], missing: Any) -> pa.Array:
    finite = np.isfinite(x)
    integral = finite & (np.floor(np.where(finite, x, 0)) == np.where(finite, x, 0)) & (np.abs(x) < 2**53)
    if integral.all() or not finite.any():
        out = pa.array(np.where(finite, x, 0).astype(np.int64)).cast(pa.string())
    else:
        out = pa.array(
            [str(int(v)) if i else repr(float(v)) for v, i in zip(x.tolist(), integral.tolist(), strict=True)]
        )
    return pc.if_else(pc.or_(pa.array(~finite), missing), pa.scalar(None, pa.string()), out)


def label_floats(labels: pa.Array) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Canonical label text as numbers (regression); NaN where it is not one."""
    return np.asarray(pc.fill_null(pc.cast(labels, pa.float64(), safe=False), np.nan).to_numpy(zero_copy_only=False))


@contextmanager
def _locked(store: Path) -> Iterator[None]:
    store.mkdir(parents=True, exist_ok=True)
    with open(store / ".lock", "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _ingested(store: Path) -> dict[str, Any]:
    path = store / INGESTED
    if not path.exists():
        return {"files": {}, "parts": 0}
    try:
        doc = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise LabelError(f"{path}: not JSON ({exc})") from None
    return doc if isinstance(doc, dict) else {"files": {}, "parts": 0}


def ingest(
    data: str,
    store: Path,
    id_column: str | None,
    label_column: str = "label",
    storage: ObjectStorage | None = None,
) -> IngestReport:
    storage = storage or Storage()
    files = [f for f in list_files(data, storage) if f.lower().removesuffix(".gz").endswith(_EXTENSIONS)]
    if not files:
        raise SourceError(f"{data!r} holds no label files (.csv, .jsonl, .json or .parquet)")
    done = skipped = rows = 0
    with _locked(store):
        state = _ingested(store)
        seen: dict[str, Any] = state.setdefault("files", {})
        for uri in files:
            stamp = _stamp(uri, storage)
            if seen.get(uri, {}).get("stamp") == stamp:
                skipped += 1
                continue
            table = _read_labels(uri, id_column, label_column, storage)
            state["parts"] = int(state.get("parts", 0)) + 1
            part = f"{LABELS_DIR}/{state['parts']:06d}-{uuid.uuid4().hex[:8]}.parquet"
            (store / LABELS_DIR).mkdir(parents=True, exist_ok=True)
            tmp = store / LABELS_DIR / f".{uuid.uuid4().hex}.tmp"
            pq.write_table(table, tmp)
            os.replace(tmp, store / part)
            seen[uri] = {"stamp": stamp, "rows": table.num_rows, "part": part}
            write_atomic(store / INGESTED, dump(state))  # after each file: a crash re-ingests at most one
            done += 1
            rows += table.num_rows
    return IngestReport(done, rows, skipped)


_EXTENSIONS = (".csv", ".jsonl", ".json", ".ndjson", ".parquet", ".pq")


def _stamp(uri: str, storage: ObjectStorage) -> str:
    """What identifies a version of a file: its size and the store's change stamp (mtime, inode… or ETag)."""
    info = storage.info(uri)
    return f"{info.size}:{info.stamp}"


def _read_labels(uri: str, id_column: str | None, label_column: str, storage: ObjectStorage) -> pa.Table:
    ids: list[pa.Array] = []
    labels: list[pa.Array] = []
    for batch in read(uri, storage=storage):
        t = batch.table
        names = t.column_names
        if "groundTruthData" in names and "eventMetadata" in names and (id_column is None or id_column not in names):
            key = pc.struct_field(t.column("eventMetadata"), "eventId")
            value = pc.struct_field(t.column("groundTruthData"), "data")
        else:
            if id_column is None:
                raise LabelError(f"{uri}: name the id column with --id-column (columns: {', '.join(names)})")
            missing = [c for c in (id_column, label_column) if c not in names]
            if missing:
                raise LabelError(f"{uri}: no column {', '.join(map(repr, missing))} (columns: {', '.join(names)})")
            key, value = t.column(id_column), t.column(label_column)
        key = _flat(pc.cast(key, pa.string()))
        value = canonical(value)
        keep = pc.and_(pc.is_valid(key), pc.is_valid(value))
        ids.append(pc.filter(key, keep))
        labels.append(pc.filter(value, keep))
    if not ids:
        return pa.table({"id": pa.array([], pa.string()), "label": pa.array([], pa.string())})
    return pa.table({"id": pa.concat_arrays(ids), "label": pa.concat_arrays(labels)})


def _flat(a: pa.Array | pa.ChunkedArray) -> pa.Array:
    return a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a


def load(store: Path) -> pa.Table:
    """Every label in the store, one per id (the last ingested): columns ``id``, ``label``."""
    folder = store / LABELS_DIR
    if not store.exists():
        raise LabelError(f"label store {store} does not exist: ingest with servekit monitor labels")
    parts = sorted(p for p in folder.glob("*.parquet")) if folder.exists() else []
    if not parts:
        return pa.table({"id": pa.array([], pa.string()), "label": pa.array([], pa.string())})
    table = pa.concat_tables([pq.read_table(p) for p in parts])
    table = table.append_column("seq", pa.array(np.arange(table.num_rows, dtype=np.int64)))
    last = table.group_by("id").aggregate([("seq", "max")])
    return table.take(last.column("seq_max")).select(["id", "label"])
