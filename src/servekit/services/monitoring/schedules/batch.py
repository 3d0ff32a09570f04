"""Monitoring what a batch transform job captured (``BatchTransformInput``): the input read from a job definition, and
an execution's window of that capture turned into capture records the monitor reads.

SageMaker's batch data capture (``CreateTransformJob``'s ``DataCaptureConfig``) writes, under its
``DestinationS3Uri``, ``input/yyyy/mm/dd/hh/<name>.json`` and ``output/yyyy/mm/dd/hh/<name>.json``: each a manifest,
a JSON array whose first element is ``{"prefix": "s3://…/"}`` and whose others are keys under that prefix (the
transform's input files, or its ``.out`` files), labelled with the hour the job ran. The data itself is not copied.
A monitoring schedule names that destination as ``BatchTransformInput.DataCapturedDestinationS3Uri`` with the
records' ``DatasetFormat`` (``Csv`` with or without a header row, ``Json`` lines or not, ``Parquet``).

An execution takes the manifests under ``input/`` whose hour overlaps its analysis window, reads the files they list
and writes each as one record of SageMaker's endpoint capture format (CSV or JSON text as sent; Parquet as JSON
lines), stamped inside the window, into a folder the monitor then reads as it reads an endpoint's capture: the
monitor stays the one reader of capture records. Data quality only: model quality joins labels to captured
predictions by inference id, which batch capture records only with ``GenerateInferenceId``.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from servekit.services.monitoring.schedules.locations import JobSpecError

HOUR = 3600
# (an s3:// or file:// URI or a local path) -> the local file or folder it names, None when it is not here
Locate = Callable[[str], Path | None]


class BatchInputError(JobSpecError):
    """A BatchTransformInput servekit cannot monitor, or a capture it cannot read."""


@dataclass(frozen=True, slots=True)
class BatchInput:
    """``BatchTransformInput``, checked: where the capture is and how its records are written."""

    destination: str  # DataCapturedDestinationS3Uri, as given
    format: str  # "csv", "json" or "parquet"
    header: bool = False  # csv: the first row of each file names the columns
    lines: bool = False  # json: one JSON document per line


def batch_input(given: Mapping[str, Any], where: str) -> BatchInput:
    """``given`` (a ``BatchTransformInput``) as a :class:`BatchInput`."""
    destination = str(given.get("DataCapturedDestinationS3Uri") or "")
    if not destination:
        raise BatchInputError(f"{where}.BatchTransformInput needs DataCapturedDestinationS3Uri.")
    fmt = given.get("DatasetFormat") or {}
    kinds = [k for k in ("Csv", "Json", "Parquet") if k in fmt]
    if len(kinds) != 1:
        raise BatchInputError(f"{where}.BatchTransformInput.DatasetFormat takes exactly one of Csv, Json and Parquet.")
    kind = kinds[0]
    options = fmt.get(kind) or {}
    return BatchInput(
        destination=destination,
        format=kind.lower(),
        header=kind == "Csv" and bool(options.get("Header")),
        lines=kind == "Json" and bool(options.get("Line")),
    )


def hour_of(parts: tuple[str, ...]) -> float | None:
    """The epoch second a ``yyyy/mm/dd/hh`` folder's hour starts at; None for any other path."""
    if len(parts) != 4 or not all(p.isdigit() for p in parts):
        return None
    try:
        return datetime(int(parts[0]), int(parts[1]), int(parts[2]), int(parts[3]), tzinfo=UTC).timestamp()
    except ValueError:
        return None


def manifests(root: Path, since: float, until: float) -> Iterator[tuple[float, Path]]:
    """(hour start, manifest) under ``root/input`` for the hours that overlap ``[since, until)``, oldest first
    (files whose names start with ``.`` or ``_`` are a writer's temporary files)."""
    base = root / "input"
    found: list[tuple[float, Path]] = []
    for folder, dirs, files in os.walk(base):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
        hour = hour_of(Path(folder).relative_to(base).parts)
        if hour is None or hour + HOUR <= since or hour >= until:
            continue
        found += [(hour, Path(folder) / f) for f in sorted(files) if not f.startswith((".", "_"))]
    yield from sorted(found)


def manifest_uris(text: str, source: str) -> list[str]:
    """The object URIs a manifest lists (``prefix`` + each key)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BatchInputError(f"{source} is not a batch capture manifest (JSON): {exc}") from None
    if not isinstance(doc, list) or not doc or not isinstance(doc[0], dict) or "prefix" not in doc[0]:
        raise BatchInputError(f'{source} is not a batch capture manifest: [{{"prefix": "s3://…/"}}, "key", …]')
    prefix = str(doc[0]["prefix"])
    if not prefix.endswith("/"):
        prefix += "/"
    return [prefix + str(key).lstrip("/") for key in doc[1:] if isinstance(key, str) and key]


def stamp(hour: float, since: float, until: float) -> float:
    """The inference time given to a manifest's records: its hour, moved inside the window ``[since, until)``
    (a manifest says only which hour its job ran, and the monitor keeps records by their time)."""
    return min(max(hour, since), max(since, until - 1))


def record(batch: BatchInput, data: bytes, when: float, event_id: str) -> dict[str, Any]:
    """One file of the transform's input as a record of SageMaker's endpoint capture format."""
    if batch.format == "parquet":
        text, content_type, encoding = _parquet_lines(data), "application/jsonlines", "JSON"
    else:
        text = data.decode("utf-8")
        if batch.format == "csv":
            content_type, encoding = "text/csv", "CSV"
            if batch.header:
                text = text.split("\n", 1)[1] if "\n" in text else ""
        else:
            content_type, encoding = ("application/jsonlines" if batch.lines else "application/json"), "JSON"
    return {
        "captureData": {
            "endpointInput": {"observedContentType": content_type, "mode": "INPUT", "data": text, "encoding": encoding}
        },
        "eventMetadata": {
            "eventId": event_id,
            "inferenceTime": datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
        },
        "eventVersion": "0",
    }


def _parquet_lines(data: bytes) -> str:
    import io

    import pyarrow.parquet as pq  # type: ignore[import-untyped]  # only a Parquet capture needs it

    rows = pq.read_table(io.BytesIO(data)).to_pylist()
    return "\n".join(json.dumps(r, default=str) for r in rows)


def stage(batch: BatchInput, locate: Locate, since: float, until: float, dest: Path) -> int:
    """Write the records of the capture in ``[since, until)`` under ``dest`` (in ``yyyy/mm/dd/hh`` folders of their
    time, as an endpoint's capture); how many files they came from. BatchInputError when the destination or a file
    a manifest lists is not on this machine."""
    root = locate(batch.destination.rstrip("/") + "/")
    if root is None:
        return 0  # nothing captured there yet (the destination's folder does not exist)
    count = 0
    for hour, manifest in manifests(root, since, until):
        when = stamp(hour, since, until)
        lines: list[str] = []
        for uri in manifest_uris(manifest.read_text(errors="replace"), str(manifest)):
            path = locate(uri)
            if path is None or not path.is_file():
                raise BatchInputError(f"{uri}, listed in the batch capture manifest {manifest}, is not in servekit's "
                                      "S3 store or on this machine.")  # fmt: skip
            lines.append(json.dumps(record(batch, path.read_bytes(), when, uuid.uuid4().hex)))
            count += 1
        if lines:
            t = datetime.fromtimestamp(when, UTC)
            folder = dest / t.strftime("%Y/%m/%d/%H")
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"batch-{t:%M-%S}-{uuid.uuid4().hex[:8]}.jsonl").write_text("\n".join(lines) + "\n")
    return count
