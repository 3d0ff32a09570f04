"""Fixture generators for monitoring: SageMaker-format capture files and synthetic feature data.

``write_capture_files`` lays records out as ``servekit serve`` (and SageMaker) does:
``<dest>/<model>/<version>/yyyy/mm/dd/hh/<MM>-<SS>-<n>.jsonl``, one JSON record per line, the request body in
``captureData.endpointInput`` as JSON (TF Serving ``{"instances": [...]}``), CSV or BASE64 text.
``synthetic_features`` draws a seeded table of numerical and categorical features with the usual kinds of
drift switched on by arguments.
"""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from servekit.serving.capture import record

Row = Sequence[Any] | dict[str, Any]


def _csv_text(rows: Sequence[Row]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    for r in rows:
        w.writerow(["" if v is None else v for v in (r.values() if isinstance(r, dict) else r)])
    return buf.getvalue()


def capture_record(
    t: float, rows: Sequence[Row], encoding: str = "JSON", event_id: str | None = None
) -> dict[str, Any]:
    """One capture record at epoch second ``t`` whose request carries ``rows`` (built by the writer's own
    :func:`servekit.serving.capture.record.capture_record`).

    ``encoding``: ``JSON`` (a TF Serving ``{"instances": rows}`` body), ``CSV`` (``text/csv`` rows) or ``BASE64``
    (the JSON body as a content type SageMaker is not told is text, so it stores it base64-encoded).
    """
    if encoding == "CSV":
        body, content_type = _csv_text(rows).encode(), "text/csv"
    else:
        body = orjson.dumps({"instances": list(rows)})
        content_type = "application/octet-stream" if encoding == "BASE64" else "application/json"
    output = orjson.dumps({"predictions": [0.0] * len(rows)})
    when = datetime.fromtimestamp(t, UTC)
    return record.capture_record(when, content_type, body, "application/json", output, event_id)


def write_capture_files(
    dest: Path,
    records: Iterable[tuple[float, Sequence[Row]]],
    *,
    model: str = "model",
    version: int = 1,
    encoding: str = "JSON",
) -> list[Path]:
    """Write ``(epoch seconds, rows of one request)`` pairs into hourly partition files; returns the files."""
    by_hour: dict[str, list[bytes]] = defaultdict(list)
    first_of_hour: dict[str, float] = {}
    for t, rows in records:
        part = record.partition(model, version, datetime.fromtimestamp(t, UTC))
        first_of_hour.setdefault(part, t)
        by_hour[part].append(orjson.dumps(capture_record(t, rows, encoding)))
    files = []
    for n, (part, lines) in enumerate(sorted(by_hour.items())):
        folder = dest / part
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{datetime.fromtimestamp(first_of_hour[part], UTC):%M-%S}-{n:06d}.jsonl"
        path.write_bytes(b"\n".join(lines) + b"\n")
        files.append(path)
    return files


def synthetic_features(
    n: int,
    seed: int,
    *,
    numerical: int = 2,
    categorical: int = 2,
    mean_shift: float = 0.0,
    scale: float = 1.0,
    proportions: Sequence[float] = (0.5, 0.3, 0.2),
    unseen_share: float = 0.0,
    missing_share: float = 0.0,
) -> dict[str, np.ndarray[Any, Any]]:
    """``num_<i>`` ~ Normal(i + mean_shift, scale) and ``cat_<i>`` over ``a``, ``b``, ``c``… with ``proportions``;
    ``unseen_share`` of the categorical values become ``new_<k>``, ``missing_share`` of every column is missing
    (NaN / None)."""
    rng = np.random.default_rng(seed)
    letters = [chr(ord("a") + i) for i in range(len(proportions))]
    out: dict[str, np.ndarray[Any, Any]] = {}
    for i in range(numerical):
        x = rng.normal(i + mean_shift, scale, n)
        if missing_share:
            x[rng.random(n) < missing_share] = np.nan
        out[f"num_{i}"] = x
    p = np.asarray(proportions, dtype=float) / np.sum(proportions)
    for i in range(categorical):
        c = rng.choice(np.array(letters, dtype=object), size=n, p=p)
        if unseen_share:
            mask = rng.random(n) < unseen_share
            c[mask] = [f"new_{k}" for k in rng.integers(0, 3, int(mask.sum()))]
        if missing_share:
            c[rng.random(n) < missing_share] = None
        out[f"cat_{i}"] = c
    return out


def feature_rows(columns: dict[str, np.ndarray[Any, Any]]) -> list[list[Any]]:
    """Column arrays → positional rows (NaN → None), as a client would send them."""
    names = list(columns)
    rows = []
    for values in zip(*(columns[n].tolist() for n in names), strict=True):
        rows.append([None if isinstance(v, float) and v != v else v for v in values])
    return rows
