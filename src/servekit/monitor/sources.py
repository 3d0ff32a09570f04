"""Reading monitored data as a stream of Arrow tables: CSV, Parquet, JSON lines and SageMaker capture files.

A source is a file or a folder (searched recursively; names starting with ``.`` or ``_`` are skipped, so a
capture writer's temporary files never count), on a local path or any URI ``servekit.storage`` opens. Each file
is read in batches of at most ``batch_rows`` rows, so memory depends on the batch size, not on the data size. CSV
columns are read as text and converted per feature (see ``schema``), so one odd value never fails a file.
"""

from __future__ import annotations

import csv
import itertools
import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np
import numpy.typing as npt
import orjson
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
import pyarrow.csv as pacsv  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from servekit.errors import ConfigError
from servekit.monitor.capture import Row, UndecodableRecord, decode_record, json_rows
from servekit.monitor.windows import parse_time
from servekit.storage import ObjectStorage, Storage

log = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float64]
_PARTITION_RE = re.compile(r"(?:^|/)(\d{4})/(\d{2})/(\d{2})/(\d{2})/[^/]+$")


class SourceError(ValueError):
    """The data cannot be read at all (no files, unknown format, missing timestamp column)."""


class UnreadableFile(SourceError):
    """A file of the data cannot be parsed: empty, not UTF-8 text, not valid CSV or Parquet. The message is one
    line naming the file and the problem."""


@dataclass(frozen=True, slots=True)
class DataBatch:
    table: pa.Table
    timestamps: FloatArray | None  # epoch seconds per row; NaN where unknown


@dataclass(slots=True)
class SourceStats:
    files: int = 0
    rows: int = 0
    undecodable_records: int = 0
    rows_without_timestamp: int = 0
    errors: list[str] = field(default_factory=list)


def list_files(uri: str, storage: ObjectStorage) -> list[str]:
    """The files to read: ``uri`` itself when it is a file, else every file below it that is not hidden."""
    try:
        entries = storage.list(uri, recursive=True)
    except FileNotFoundError:
        raise SourceError(f"{uri!r} does not exist") from None
    except ConfigError as exc:
        raise SourceError(str(exc)) from None
    if len(entries) == 1 and entries[0].uri == uri and not entries[0].is_dir:
        return [uri]
    files = [e.uri for e in entries if not _hidden(e.key)]
    if not files:
        raise SourceError(f"{uri!r} holds no files")
    return files


def _hidden(relative: str) -> bool:
    return any(part.startswith((".", "_")) for part in relative.split("/"))


def file_format(storage: ObjectStorage, path: str) -> str:
    name = path.lower().removesuffix(".gz")
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    if name.endswith(".csv"):
        return "csv"
    if name.endswith((".jsonl", ".json", ".ndjson")):
        with _open(storage, path) as f:
            first = next((line for line in f if line.strip()), b"")
        return "capture" if b'"captureData"' in first else "jsonl"
    raise SourceError(f"{path}: unknown format (expected .csv, .parquet or .jsonl)")


def read(
    uri: str,
    *,
    timestamp_column: str | None = None,
    columns: Sequence[str] = (),
    since: float | None = None,
    until: float | None = None,
    batch_rows: int = 65536,
    stats: SourceStats | None = None,
    storage: ObjectStorage | None = None,
) -> Iterator[DataBatch]:
    """Every file under ``uri`` as batches. Capture files carry their own timestamps; other formats take them
    from ``timestamp_column`` (dropped from the table) when it is given. ``columns`` names positional
    (list or CSV) capture rows; capture partitions wholly outside ``[since - 1h, until + 1h)`` are skipped."""
    stats = stats if stats is not None else SourceStats()
    storage = storage or Storage()
    files = list_files(uri, storage)
    for path in files:
        fmt = file_format(storage, path)
        if fmt == "capture" and not _partition_overlaps(path, since, until):
            continue
        stats.files += 1
        if fmt == "capture":
            batches = _read_capture(storage, path, columns, batch_rows, stats)
        else:
            batches = _with_timestamps(_read_table(storage, path, fmt, batch_rows), timestamp_column, path)
        for batch in batches:
            stats.rows += batch.table.num_rows
            yield batch


def _open(storage: ObjectStorage, path: str) -> IO[bytes]:
    return storage.open(path, "rb", compression="gzip" if path.lower().endswith(".gz") else None)


def _partition_overlaps(path: str, since: float | None, until: float | None) -> bool:
    m = _PARTITION_RE.search(path)
    if not m:
        return True
    start = parse_time("{}-{}-{}T{}:00:00Z".format(*m.groups()))
    # capture delivery is buffered, so a record can land in the partition next to its inference time
    return (since is None or start + 7200 > since) and (until is None or start - 3600 < until)


def _read_table(storage: ObjectStorage, path: str, fmt: str, batch_rows: int) -> Iterator[pa.Table]:
    with _open(storage, path) as f:
        if fmt == "parquet":
            try:
                # no pre-buffering: it keeps whole row groups of every column in memory, so memory grew with the file
                parquet = pq.ParquetFile(f, pre_buffer=False, buffer_size=1 << 20)
                for rb in parquet.iter_batches(batch_size=batch_rows):
                    yield pa.Table.from_batches([rb])
            except pa.ArrowInvalid as exc:
                raise UnreadableFile(f"{path}: not a readable Parquet file ({_first_line(exc)})") from None
        elif fmt == "csv":
            yield from _read_csv(f, batch_rows, path)
        else:
            lines = (line for line in f if line.strip())
            while chunk := list(itertools.islice(lines, batch_rows)):
                try:
                    rows = [r for line in chunk for r in json_rows(orjson.loads(line))]
                except orjson.JSONDecodeError as exc:
                    raise SourceError(f"{path}: not JSON lines ({exc})") from None
                yield rows_to_table(rows, ())


def _read_csv(f: IO[bytes], batch_rows: int, path: str) -> Iterator[pa.Table]:
    head = f.readline()
    if not head.strip():
        problem = "empty CSV file" if not head else "the first line is blank"
        raise UnreadableFile(f"{path}: {problem} (the first line must name the columns)")
    try:
        names = next(csv.reader([head.decode("utf-8-sig")]), [])
    except UnicodeDecodeError as exc:
        raise UnreadableFile(
            f"{path}: not UTF-8 text (byte 0x{head[exc.start]:02x} at position {exc.start} of the header line); "
            "save the file as UTF-8"
        ) from None
    f.seek(0)
    try:
        reader = pacsv.open_csv(
            f,
            read_options=pacsv.ReadOptions(block_size=max(1 << 16, batch_rows * 64)),
            convert_options=pacsv.ConvertOptions(
                column_types={n: pa.string() for n in names}, strings_can_be_null=True
            ),
        )
        for rb in reader:
            yield pa.Table.from_batches([rb])
    except pa.ArrowInvalid as exc:
        raise UnreadableFile(f"{path}: {_csv_problem(exc, names)}") from None


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _csv_problem(exc: pa.ArrowInvalid, names: Sequence[str]) -> str:
    """Arrow's CSV error as one line a user can act on."""
    message = _first_line(exc)
    if "invalid UTF8" in message:
        m = re.search(r"column #(\d+)", message)
        index = int(m.group(1)) if m else -1
        where = f" in column {names[index]!r}" if 0 <= index < len(names) else ""
        return f"not UTF-8 text (invalid bytes{where}); save the file as UTF-8"
    if "Empty CSV" in message:
        return "empty CSV file (the first line must name the columns)"
    return f"not a readable CSV file ({message})"


def _with_timestamps(tables: Iterator[pa.Table], column: str | None, path: str) -> Iterator[DataBatch]:
    for table in tables:
        if column is None:
            yield DataBatch(table, None)
            continue
        if column not in table.column_names:
            raise SourceError(f"{path}: no timestamp column {column!r} (columns: {', '.join(table.column_names)})")
        ts = epoch_seconds(table.column(column))
        yield DataBatch(table.drop_columns([column]), ts)


def epoch_seconds(col: pa.ChunkedArray | pa.Array) -> FloatArray:
    """Timestamps, dates, ISO 8601 text (no zone = UTC) or numbers (epoch seconds) → float seconds; NaN if not."""
    t = col.type
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        micros = pc.cast(pc.cast(col, pa.timestamp("us", tz=getattr(t, "tz", None))), pa.int64())
        return _floats(micros) / 1e6
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return _floats(pc.cast(col, pa.float64()))
    text = pc.utf8_trim_whitespace(pc.cast(col, pa.string()))
    for target in (pa.timestamp("us", tz="UTC"), pa.timestamp("us")):
        try:
            return epoch_seconds(pc.cast(text, target))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
    numeric = pc.cast(text, pa.float64(), safe=False) if _all_numbers(text) else None
    if numeric is not None:
        return _floats(numeric)
    return np.array([_parse_or_nan(v) for v in text.to_pylist()], dtype=float)


def _all_numbers(text: Any) -> bool:
    ok = pc.match_substring_regex(text, r"^[-+]?\d+(\.\d*)?$")
    return bool(pc.all(pc.or_kleene(ok, pc.is_null(text))).as_py())


def _parse_or_nan(v: str | None) -> float:
    if v is None:
        return float("nan")
    try:
        return parse_time(v)
    except ValueError:
        return float("nan")


def _floats(arr: Any) -> FloatArray:
    filled = pc.fill_null(pc.cast(arr, pa.float64()), float("nan"))
    return np.asarray(filled.to_numpy(zero_copy_only=False), dtype=float)


def _read_capture(
    storage: ObjectStorage, path: str, columns: Sequence[str], batch_rows: int, stats: SourceStats
) -> Iterator[DataBatch]:
    rows: list[Row] = []
    times: list[float] = []
    with _open(storage, path) as f:
        for line in f:
            if not line.strip():
                continue
            try:
                decoded = decode_record(line)
            except UndecodableRecord as exc:
                stats.undecodable_records += 1
                if len(stats.errors) < 20:
                    stats.errors.append(f"{path}: {exc}")
                continue
            if decoded is None:
                continue
            when, new = decoded
            rows.extend(new)
            times.extend([when] * len(new))
            if len(rows) >= batch_rows:
                yield DataBatch(rows_to_table(rows, columns), np.array(times, dtype=float))
                rows, times = [], []
    if rows:
        yield DataBatch(rows_to_table(rows, columns), np.array(times, dtype=float))


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
