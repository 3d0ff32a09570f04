"""The Parquet capture layout: a column per feature, join keys and metadata columns, bodies kept whole, read back
through the same reader as the JSON Lines layout (and so by the monitor)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from servekit.config.models import CaptureConfig
from servekit.errors import ConfigError
from servekit.services.monitoring.stream.sources import SourceStats, read
from servekit.serving.capture.reader import capture_layout, read_capture_file
from servekit.serving.capture.sink import CaptureWriter
from servekit.storage import Storage

WHEN = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)


def write(tmp_path: Path, fmt: str, prefix: str | None = None, body: bool = True) -> list[Path]:
    w = CaptureWriter(CaptureConfig(destination=str(tmp_path), format=fmt, partition_prefix=prefix), now=lambda: WHEN)
    w.start()
    x = np.array([[1.5, 2.0], [3.0, 4.25]], np.float32)
    probs = np.array([[0.2, 0.8], [0.9, 0.1]])
    assert w.offer_tensors("m", 3, {"X": x}, {"label": np.array([1, 0]), "probabilities": probs}, "order-1")
    if body:  # an inference.py model's body, kept as it was
        assert w.offer_bytes("m", 3, "text/csv", b"5,6\n", "application/json", b'{"predictions": [1]}', "order-2")
    w.close()
    return sorted(tmp_path.rglob(f"*.{fmt}"))


def test_parquet_has_a_column_per_feature_and_the_exchange_metadata(tmp_path: Path) -> None:
    (f,) = write(tmp_path, "parquet", "ep/A")
    assert f.parent.relative_to(tmp_path).parts == ("ep", "A", "2024", "05", "06", "07")
    table = pq.read_table(f)
    assert table.schema.metadata[b"servekit.capture"] == b"1"
    rows = table.to_pylist()
    assert [r["inferenceId"] for r in rows] == ["order-1", "order-1", "order-2"]
    assert [r["input.X[0]"] for r in rows] == [1.5, 3.0, None]
    assert [r["input.X[1]"] for r in rows] == [2.0, 4.25, None]
    assert [r["output.probabilities"] for r in rows[:2]] == [[0.2, 0.8], [0.9, 0.1]]
    assert {r["variant"] for r in rows} == {"A"} and {r["modelVersion"] for r in rows} == {3}
    assert [(r["eventRow"], r["eventRows"]) for r in rows] == [(0, 2), (1, 2), (0, 1)]
    assert rows[2]["inputBody"] == b"5,6\n" and rows[2]["inputContentType"] == "text/csv"
    assert rows[0]["eventTime"] == WHEN


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_both_layouts_read_back_the_same_rows_and_keys(tmp_path: Path, fmt: str) -> None:
    (f,) = write(tmp_path, fmt)
    storage = Storage()
    layout = capture_layout(storage, str(f))
    assert layout == fmt
    inputs = list(read_capture_file(storage, str(f), layout, side="input", columns=["a", "b"]))
    rows = [r for b in inputs for r in b.table.to_pylist()]
    # CSV bodies are text (typed per feature by the monitor); in one JSON Lines batch a column mixing them is text
    assert [{k: float(v) for k, v in r.items()} for r in rows] == [
        {"a": 1.5, "b": 2.0},
        {"a": 3.0, "b": 4.25},
        {"a": 5.0, "b": 6.0},
    ]
    assert [k for b in inputs for k in b.keys] == ["order-1:0", "order-1:1", "order-2"]
    outputs = list(read_capture_file(storage, str(f), layout, side="output"))
    labels = [r["label"] if r.get("label") is not None else r["_c0"] for b in outputs for r in b.table.to_pylist()]
    assert labels == [1, 0, 1]
    assert {float(t) for b in inputs for t in b.times} == {WHEN.timestamp()}


def test_the_monitor_reads_parquet_capture_like_json_lines(tmp_path: Path) -> None:
    for fmt in ("jsonl", "parquet"):
        write(tmp_path / fmt, fmt, body=False)
    tables = {}
    for fmt in ("jsonl", "parquet"):
        stats = SourceStats()
        batches = list(read(str(tmp_path / fmt), columns=["a", "b"], stats=stats))
        tables[fmt] = [r for b in batches for r in b.table.to_pylist()]
        assert stats.rows == 2 and stats.undecodable_records == 0
        assert all(b.watermark == WHEN.replace(minute=0, second=0).timestamp() - 3600 for b in batches)
    assert tables["jsonl"] == tables["parquet"] == [{"a": 1.5, "b": 2.0}, {"a": 3.0, "b": 4.25}]


def test_parquet_without_pyarrow_fails_at_startup(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyarrow" else real(name, *a))
    with pytest.raises(ConfigError, match=r"pip install 'servekit\[monitor\]'"):
        CaptureWriter(CaptureConfig(destination=str(tmp_path), format="parquet"))


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ConfigError, match="jsonl or parquet"):
        CaptureConfig(destination="/tmp/c", format="csv")
