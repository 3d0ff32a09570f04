"""Capture records and tabular files as the monitor reads them."""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from servekit.services.monitoring.stream.sources import SourceError, SourceStats, epoch_seconds, read, rows_to_table
from servekit.services.monitoring.stream.windows import parse_time
from servekit.serving.capture.decode import UndecodableRecord, decode_record, payload_rows
from servekit.testing.capture_files import capture_record, write_capture_files

T0 = parse_time("2026-11-30T10:00:00Z")


def test_generated_record_has_the_sagemaker_shape() -> None:
    rec = capture_record(T0 + 0.5, [[1, 2]])
    assert set(rec) == {"captureData", "eventMetadata", "eventVersion"}
    inp = rec["captureData"]["endpointInput"]
    assert inp["mode"] == "INPUT" and inp["encoding"] == "JSON" and inp["observedContentType"] == "application/json"
    assert rec["eventMetadata"]["inferenceTime"] == "2026-11-30T10:00:00.500Z"
    assert rec["eventVersion"] == "0"


@pytest.mark.parametrize("encoding", ["JSON", "CSV", "BASE64"])
def test_decode_each_encoding(encoding: str) -> None:
    when, rows = decode_record(orjson.dumps(capture_record(T0, [[1.5, "a"], [2, "b"]], encoding)))  # type: ignore[misc]
    assert when == T0
    assert [[str(v) for v in r] for r in rows] == [["1.5", "a"], ["2", "b"]]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("body", "rows"),
    [
        ({"instances": [{"a": 1}, {"a": 2}]}, [{"a": 1}, {"a": 2}]),
        ({"instances": [1, 2]}, [[1], [2]]),
        ({"inputs": {"a": [1, 2], "b": ["x", "y"]}}, [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]),
        ({"inputs": [[1, 2]]}, [[1, 2]]),
        ({"inputs": [{"name": "X", "shape": [2, 2], "datatype": "FP32", "data": [1, 2, 3, 4]}]}, [[1, 2], [3, 4]]),
        (
            {
                "inputs": [
                    {"name": "a", "shape": [2], "data": [1, 2]},
                    {"name": "b", "shape": [2, 1], "data": [[3], [4]]},
                ]
            },
            [{"a": 1, "b": 3}, {"a": 2, "b": 4}],
        ),
        ([[1, 2], [3, 4]], [[1, 2], [3, 4]]),
        ({"a": 1}, [{"a": 1}]),
    ],
)
def test_json_bodies(body: object, rows: list[object]) -> None:
    assert payload_rows({"encoding": "JSON", "data": orjson.dumps(body).decode()}) == rows


def test_jsonlines_and_base64_csv() -> None:
    lines = '{"a": 1}\n{"a": 2}\n'
    assert payload_rows({"encoding": "JSON", "observedContentType": "application/jsonlines", "data": lines}) == [
        {"a": 1},
        {"a": 2},
    ]
    data = base64.b64encode(b"1,2\n3,4\n").decode()
    assert payload_rows({"encoding": "BASE64", "observedContentType": "text/csv", "data": data}) == [
        ["1", "2"],
        ["3", "4"],
    ]


@pytest.mark.parametrize(
    "line",
    [
        b"not json",
        b'{"captureData": {}}',
        orjson.dumps(
            {
                "captureData": {"endpointInput": {"encoding": "JSON", "data": "{"}},
                "eventMetadata": {"inferenceTime": "2026-11-30T10:00:00Z"},
            }
        ),
        orjson.dumps(
            {
                "captureData": {"endpointInput": {"encoding": "BASE64", "data": "%%%"}},
                "eventMetadata": {"inferenceTime": "2026-11-30T10:00:00Z"},
            }
        ),
    ],
)
def test_undecodable_records(line: bytes) -> None:
    with pytest.raises(UndecodableRecord):
        decode_record(line)


def test_output_only_record_has_no_rows() -> None:
    rec = capture_record(T0, [[1]])
    del rec["captureData"]["endpointInput"]
    assert decode_record(orjson.dumps(rec)) is None


def test_read_capture_tree_skips_hidden_files_counts_bad_records_and_prunes_partitions(tmp_path: Path) -> None:
    files = write_capture_files(
        tmp_path, [(T0 + h * 3600 + i, [[h, i]]) for h in range(3) for i in range(5)], model="m", version=2
    )
    assert files[0].relative_to(tmp_path).parts[:6] == ("m", "2", "2026", "11", "30", "10")
    (files[0].parent / ".partial.jsonl.tmp").write_text("garbage\n")
    with files[1].open("ab") as f:
        f.write(b'{"broken": true}\n')
    stats = SourceStats()
    batches = list(read(str(tmp_path), columns=("x", "y"), stats=stats))
    table = pa.concat_tables([b.table for b in batches])
    assert table.column_names == ["x", "y"] and table.num_rows == 15
    assert stats.undecodable_records == 1 and stats.files == 3
    ts = np.concatenate([b.timestamps for b in batches if b.timestamps is not None])
    assert ts.min() == T0 and ts.max() == T0 + 2 * 3600 + 4
    late = list(read(str(tmp_path), since=T0 + 3 * 3600 + 1))  # only the last hour's partition is near enough
    assert sum(b.table.num_rows for b in late) == 5


def test_tabular_files_with_timestamp_columns(tmp_path: Path) -> None:
    (tmp_path / "d.csv").write_text("ts,x,c\n2026-11-30T10:00:00Z,1,a\n2026-11-30 10:30:00,2.5,\n,NA,b\n")
    (b,) = list(read(str(tmp_path / "d.csv"), timestamp_column="ts"))
    assert b.table.column_names == ["x", "c"]
    assert b.timestamps is not None and b.timestamps[:2].tolist() == [T0, T0 + 1800] and np.isnan(b.timestamps[2])
    assert b.table.column("x").to_pylist() == ["1", "2.5", None]
    pq.write_table(
        pa.table({"when": pa.array([T0 * 1e6], pa.timestamp("us", tz="UTC")), "x": [1.0]}), tmp_path / "d.parquet"
    )
    (p,) = list(read(str(tmp_path / "d.parquet"), timestamp_column="when"))
    assert p.timestamps is not None and p.timestamps.tolist() == [T0]
    (tmp_path / "d.jsonl").write_text('{"t": 1795000000, "x": 1}\n{"t": 1795000060, "x": "oops"}\n')
    (j,) = list(read(str(tmp_path / "d.jsonl"), timestamp_column="t"))
    assert j.timestamps is not None and j.timestamps.tolist() == [1795000000, 1795000060]
    assert j.table.column("x").to_pylist() == ["1", "oops"]  # mixed types become text, checked per feature
    with pytest.raises(SourceError, match="no timestamp column"):
        list(read(str(tmp_path / "d.csv"), timestamp_column="nope"))
    with pytest.raises(SourceError):
        list(read(str(tmp_path / "missing")))


def test_epoch_seconds_from_odd_text() -> None:
    out = epoch_seconds(pa.array(["2026-11-30 10:00:00+00:00", "yesterday", None]))
    assert out[0] == T0 and np.isnan(out[1]) and np.isnan(out[2])


def test_rows_to_table_names_positional_rows_and_pads_short_ones() -> None:
    t = rows_to_table([[1, "a"], [2], [3, "c", 9]], ("x", "y"))
    assert t.column_names == ["x", "y", "_c2"]
    assert t.column("y").to_pylist() == ["a", None, "c"]
    mixed = rows_to_table([{"x": 1}, [2, 3]], ("x", "y"))
    assert mixed.column("x").to_pylist() == [1, 2] and mixed.column("y").to_pylist() == [None, 3]


def test_reads_what_servekit_capture_writes(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from servekit.config.models import CaptureConfig
    from servekit.serving.capture.sink import CaptureWriter

    times = iter([datetime(2026, 11, 30, 10, 5, tzinfo=UTC), datetime(2026, 11, 30, 11, 7, 30, tzinfo=UTC)])
    writer = CaptureWriter(CaptureConfig(destination=str(tmp_path)), now=lambda: next(times))
    writer.start()
    x = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    assert writer.offer_tensors("iris", 1, {"X": x}, {"y": np.array([0, 1])})
    assert writer.offer_bytes("iris", 1, "text/csv", b"5,6\n", "text/csv", b"0\n")
    writer.close()
    batches = list(read(str(tmp_path), columns=("a", "b")))
    values = sorted(str(v) for b in batches for v in b.table.column("a").to_pylist())
    assert values == ["1.0", "3.0", "5"]  # JSON numbers and CSV text: each batch keeps its own type
    ts = sorted(np.concatenate([b.timestamps for b in batches if b.timestamps is not None]).tolist())
    assert ts == [T0 + 300, T0 + 300, T0 + 3600 + 450]


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [
        ("blank.csv", b"\n\n", "the first line is blank (the first line must name the columns)"),
        ("ragged.csv", b"a,b\n1,2\n3\n", "not a readable CSV file (CSV parse error: Expected 2 columns, got 1: 3)"),
        ("late.csv", b"a,b\n" + b"1,2\n" * 5000 + b"3,\xff\n", "not UTF-8 text (invalid bytes in column 'b')"),
        ("garbage.parquet", b"PAR1 not really", "not a readable Parquet file ("),
    ],
)
def test_a_file_that_cannot_be_parsed_is_one_line_naming_it(
    tmp_path: Path, name: str, content: bytes, problem: str
) -> None:
    from servekit.services.monitoring.stream.sources import UnreadableFile

    (tmp_path / name).write_bytes(content)
    with pytest.raises(UnreadableFile) as info:
        for _ in read(str(tmp_path / name), batch_rows=1000):
            pass
    message = str(info.value)
    assert message.startswith(f"{tmp_path / name}: {problem}") and "\n" not in message
    assert isinstance(info.value, SourceError)  # the monitor's watch loop logs it and goes on
