"""Reading monitored data as a stream of Arrow tables: CSV, Parquet, JSON lines and capture files (SageMaker's
JSON Lines layout or servekit's Parquet layout, both read by ``servekit.serving.capture.reader``).

A source is a file or a folder (searched recursively; names starting with ``.`` or ``_`` are skipped, so a
capture writer's temporary files never count), on a local path or any URI ``servekit.storage`` opens. Each file
is read in batches of at most ``batch_rows`` rows, so memory depends on the batch size, not on the data size. CSV
columns are read as text and converted per feature (see ``schema``), so one odd value never fails a file.

**Watermarks.** Capture files in hourly partitions (``…/yyyy/mm/dd/hh/…``) are read oldest partition first, and
each of their batches carries a *watermark*: no row read later is older than it. Rows land in the partition of
their inference time, or (buffered delivery) the next one, so the watermark is the partition's start minus one
hour. Windowing uses it to finish windows and release their panes while reading (``monitor.panes``). Other files
carry none.
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
from servekit.services.monitoring.stream.windows import parse_time
from servekit.serving.capture.decode import json_rows
from servekit.serving.capture.reader import CaptureStats, Side, capture_layout, read_capture_file, rows_to_table
from servekit.storage import ObjectStorage, Storage

log = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float64]
_PARTITION_RE = re.compile(r"(?:^|/)(\d{4})/(\d{2})/(\d{2})/(\d{2})/[^/]+$")


class SourceError(ValueError):
    """The data cannot be read at all (no files, unknown format, missing timestamp column)."""


class UnreadableFile(SourceError):
    """A file of the data cannot be parsed: empty, not UTF-8 text, not valid CSV or Parquet. The message is one
    line naming the file and the problem."""


__all__ = ["DataBatch", "SourceError", "SourceStats", "UnreadableFile", "epoch_seconds", "read", "rows_to_table"]
# Rows land in the partition of their inference time or, delivered late, the next one.
PARTITION_SLACK = 3600.0


@dataclass(frozen=True, slots=True)
class DataBatch:
    table: pa.Table
    timestamps: FloatArray | None  # epoch seconds per row; NaN where unknown
    watermark: float | None = None  # no row read after this batch is older than this (None: unknown)
    keys: list[str] | None = None  # capture only: each row's ground-truth join key


@dataclass(slots=True)
class SourceStats:
    files: int = 0
    rows: int = 0
    undecodable_records: int = 0
    rows_without_timestamp: int = 0
    late_rows: int = 0  # rows for a window already finished (older than the source's watermark allowed)
    errors: list[str] = field(default_factory=list)
    in_progress_files: int = 0  # a capture writer's hidden files not yet published (``.<name>.tmp``): not read
    in_progress_records: int = 0  # the records (lines) in them when the listing was taken

    def in_progress_warning(self) -> str | None:
        """What was left unread because a capture writer had not yet published it, or None."""
        if not self.in_progress_files:
            return None
        return (
            f"{self.in_progress_records} record(s) in {self.in_progress_files} capture file(s) still being written "
            "(hidden .*.tmp) were not read; a capture writer publishes them within its flush interval "
            "(--capture_flush_seconds, 5 s by default): run again to include them"
        )


def list_files(uri: str, storage: ObjectStorage, stats: SourceStats | None = None) -> list[str]:
    """The files to read: ``uri`` itself when it is a file, else every file below it that is not hidden. The
    capture writer's files still being written are counted in ``stats`` (files and records), never read."""
    try:
        entries = storage.list(uri, recursive=True)
    except FileNotFoundError:
        raise SourceError(f"{uri!r} does not exist") from None
    except ConfigError as exc:
        raise SourceError(str(exc)) from None
    if len(entries) == 1 and entries[0].uri == uri and not entries[0].is_dir:
        return [uri]
    files = [e.uri for e in entries if not _hidden(e.key)]
    counted = stats if stats is not None else SourceStats()
    for e in entries:
        if _in_progress(e.key):
            counted.in_progress_files += 1
            counted.in_progress_records += _count_lines(storage, e.uri)
    if not files:
        unread = counted.in_progress_warning()
        raise SourceError(f"{uri!r} holds no files" + (f": {unread}" if unread else ""))
    return files


def _hidden(relative: str) -> bool:
    return any(part.startswith((".", "_")) for part in relative.split("/"))


def _in_progress(relative: str) -> bool:
    """A capture writer's file not yet published: ``.<name>.jsonl.tmp`` (or ``.parquet.tmp``) in a visible folder."""
    folder, _, name = relative.rpartition("/")
    return name.startswith(".") and name.endswith(".tmp") and not _hidden(folder)


def _count_lines(storage: ObjectStorage, uri: str) -> int:
    """Whole lines in a file being written (JSON Lines: one record each); 0 if it is gone or unreadable."""
    try:
        with storage.open(uri, "rb") as f:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
    except OSError:
        return 0


def file_format(storage: ObjectStorage, path: str) -> str:
    """``capture`` (JSON Lines capture), ``capture-parquet``, ``parquet``, ``csv`` or ``jsonl``."""
    name = path.lower().removesuffix(".gz")
    if name.endswith(".csv"):
        return "csv"
    if not name.endswith((".parquet", ".pq", ".jsonl", ".json", ".ndjson")):
        raise SourceError(f"{path}: unknown format (expected .csv, .parquet or .jsonl)")
    layout = capture_layout(storage, path)
    if layout == "jsonl":
        return "capture"
    if layout == "parquet":
        return "capture-parquet"
    return "parquet" if name.endswith((".parquet", ".pq")) else "jsonl"


def partition_start(path: str) -> float | None:
    """Start of the hourly capture partition ``…/yyyy/mm/dd/hh/<file>`` a file is in (epoch seconds), or None."""
    m = _PARTITION_RE.search(path)
    return parse_time("{}-{}-{}T{}:00:00Z".format(*m.groups())) if m else None


def in_time_order(files: Sequence[str]) -> list[str]:
    """Partitioned files oldest partition first (across models, versions and variants), then the others."""
    keyed = [(partition_start(f), i, f) for i, f in enumerate(files)]
    timed = sorted((t, i, f) for t, i, f in keyed if t is not None)
    return [f for *_, f in timed] + [f for t, _, f in keyed if t is None]


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
    side: Side = "input",
) -> Iterator[DataBatch]:
    """Every file under ``uri`` as batches. Capture files carry their own timestamps (and read the requests, or
    with ``side="output"`` the answers); other formats take them from ``timestamp_column`` (dropped from the
    table) when it is given. ``columns`` names positional (list or CSV) capture rows; capture partitions wholly
    outside ``[since - 1h, until + 1h)`` are skipped."""
    stats = stats if stats is not None else SourceStats()
    storage = storage or Storage()
    files = in_time_order(list_files(uri, storage, stats))
    formats = [file_format(storage, path) for path in files]
    # Watermarks only when every file is capture in an hourly partition: any other file may hold any time.
    ordered = all(
        f.startswith("capture") and partition_start(p) is not None for p, f in zip(files, formats, strict=True)
    )
    for path, fmt in zip(files, formats, strict=True):
        start = partition_start(path)
        if fmt.startswith("capture") and not _partition_overlaps(path, since, until):
            continue
        stats.files += 1
        if fmt.startswith("capture"):
            batches = _read_capture(storage, path, fmt, side, columns, batch_rows, stats)
        else:
            batches = _with_timestamps(_read_table(storage, path, fmt, batch_rows), timestamp_column, path)
        mark = start - PARTITION_SLACK if ordered and start is not None else None
        for batch in batches:
            stats.rows += batch.table.num_rows
            yield batch if mark is None else DataBatch(batch.table, batch.timestamps, mark, batch.keys)


def _open(storage: ObjectStorage, path: str) -> IO[bytes]:
    return storage.open(path, "rb", compression="gzip" if path.lower().endswith(".gz") else None)


def _partition_overlaps(path: str, since: float | None, until: float | None) -> bool:
    start = partition_start(path)
    if start is None:
        return True
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
    storage: ObjectStorage,
    path: str,
    fmt: str,
    side: Side,
    columns: Sequence[str],
    batch_rows: int,
    stats: SourceStats,
) -> Iterator[DataBatch]:
    counts = CaptureStats()
    layout = "parquet" if fmt == "capture-parquet" else "jsonl"
    try:
        for b in read_capture_file(
            storage, path, layout, side=side, columns=columns, batch_rows=batch_rows, stats=counts
        ):
            yield DataBatch(b.table, b.times, None, b.keys)
    finally:
        stats.undecodable_records += counts.undecodable_records
        stats.errors.extend(counts.errors[: max(0, 20 - len(stats.errors))])
