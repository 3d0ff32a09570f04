"""A baselining job's dataset, read the way SageMaker Model Monitor's analyzer reads it: every file under the
dataset folder in the format the job names (not guessed from file names), as Arrow tables of at most ``batch_rows``
rows.

- ``csv``: with ``header`` the first line of each file names the columns; without it columns are ``_c0``, ``_c1``,
  … (Spark's names, which the analyzer's reports use). Values are read as text and typed per feature by the baseline.
- ``json``: one JSON record per line (``lines``), else one document per file (a record or a list of records). A
  record's nested objects become ``parent.child`` columns, lists are kept as JSON text; a list record is positional
  (``_c0``, …).
- ``parquet``: the files' own columns.
- ``capture``: SageMaker's data-capture JSON Lines (``sagemakerCaptureJson``), the requests' features.

Files whose names start with ``.`` or ``_`` are skipped (``_SUCCESS``, temporary files); ``.gz`` files are
decompressed.
"""

from __future__ import annotations

import csv
import gzip
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, cast

import orjson
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.csv as pacsv  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from servekit.services.monitoring.stream.sources import SourceError, SourceStats, read
from servekit.serving.capture.reader import rows_to_table

KINDS = ("csv", "json", "parquet", "capture")


class DatasetError(SourceError):
    """The dataset cannot be read as its format says: the message names the file and the problem."""


def files(folder: Path) -> list[Path]:
    """The dataset's files: ``folder`` itself when it is a file, else every file below it that is not hidden."""
    if folder.is_file():
        return [folder]
    if not folder.is_dir():
        raise DatasetError(f"{folder}: no such file or folder")
    found = [
        p
        for p in folder.rglob("*")
        if p.is_file() and not any(part.startswith((".", "_")) for part in p.relative_to(folder).parts)
    ]
    return sorted(found)


def tables(
    folder: Path, kind: str, *, header: bool = True, lines: bool = True, batch_rows: int, stats: SourceStats
) -> Iterator[pa.Table]:
    """Every file under ``folder`` as tables of format ``kind`` (one of :data:`KINDS`; ``header`` for csv,
    ``lines`` for json), counting files and rows into ``stats``."""
    if kind not in KINDS:
        raise ValueError(f"unknown dataset format {kind!r}")
    if kind == "capture":
        for batch in read(str(folder), batch_rows=batch_rows, stats=stats):
            yield batch.table
        return
    for path in files(folder):
        stats.files += 1
        for table in _read(path, kind, header, lines, batch_rows):
            stats.rows += table.num_rows
            yield table


def _open(path: Path) -> IO[bytes]:
    if path.name.lower().endswith(".gz"):
        return cast(IO[bytes], gzip.open(path, "rb"))
    return path.open("rb")


def _read(path: Path, kind: str, header: bool, lines: bool, batch_rows: int) -> Iterator[pa.Table]:
    with _open(path) as f:
        if kind == "csv":
            yield from _csv(f, path, header, batch_rows)
        elif kind == "json":
            yield from _json(f, path, lines, batch_rows)
        else:
            try:
                parquet = pq.ParquetFile(f, pre_buffer=False, buffer_size=1 << 20)
                for rb in parquet.iter_batches(batch_size=batch_rows):
                    yield pa.Table.from_batches([rb])
            except (pa.ArrowInvalid, OSError) as exc:
                raise DatasetError(f"{path.name}: not a readable Parquet file ({_first_line(exc)})") from None


def _csv(f: IO[bytes], path: Path, header: bool, batch_rows: int) -> Iterator[pa.Table]:
    first = f.readline()
    if not first.strip():
        return  # an empty file holds no rows
    try:
        names = next(csv.reader([first.decode("utf-8-sig")]), [])
    except UnicodeDecodeError:
        raise DatasetError(f"{path.name}: not UTF-8 text (the first line); save the file as UTF-8") from None
    if not header:
        names = [f"_c{i}" for i in range(len(names))]
    f.seek(0)
    try:
        reader = pacsv.open_csv(
            f,
            read_options=pacsv.ReadOptions(
                block_size=max(1 << 16, batch_rows * 64), column_names=None if header else names
            ),
            convert_options=pacsv.ConvertOptions(
                column_types={n: pa.string() for n in names}, strings_can_be_null=True
            ),
        )
        for rb in reader:
            yield pa.Table.from_batches([rb])
    except pa.ArrowInvalid as exc:
        raise DatasetError(f"{path.name}: not a readable CSV file ({_first_line(exc)})") from None


def _json(f: IO[bytes], path: Path, lines: bool, batch_rows: int) -> Iterator[pa.Table]:
    try:
        if not lines:
            doc = orjson.loads(f.read())
            records = doc if isinstance(doc, list) else [doc]
            for i in range(0, len(records), batch_rows):
                yield _table(records[i : i + batch_rows])
            return
        stream = (line for line in f if line.strip())
        while chunk := list(itertools.islice(stream, batch_rows)):
            yield _table([orjson.loads(line) for line in chunk])
    except orjson.JSONDecodeError as exc:
        layout = "JSON lines" if lines else "a JSON document"
        raise DatasetError(f"{path.name}: not {layout} ({exc})") from None


def _table(records: list[Any]) -> pa.Table:
    return rows_to_table([_row(r) for r in records], ())


def _row(record: Any) -> dict[str, Any] | list[Any]:
    if isinstance(record, dict):
        return _flat(record, "")
    if isinstance(record, list):
        return [_scalar(v) for v in record]
    return [record]


def _flat(record: dict[str, Any], prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flat(value, f"{name}."))
        else:
            out[name] = _scalar(value)
    return out


def _scalar(value: Any) -> Any:
    return orjson.dumps(value).decode() if isinstance(value, list | dict) else value


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
