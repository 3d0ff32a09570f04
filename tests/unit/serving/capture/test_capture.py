"""Capture records and the writer: shapes, partitions, atomic files, sampling, a full buffer."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from servekit.config.models import CaptureConfig
from servekit.errors import ConfigError
from servekit.serving.capture.record import capture_record, partition
from servekit.serving.capture.sink import CaptureWriter

WHEN = datetime(2026, 11, 30, 9, 5, 7, 123000, tzinfo=UTC)
JSON_IN = b'{"instances": [[1.0, 2.0]]}'
JSON_OUT = b'{"predictions": [0]}'


def test_record_shape_matches_sagemaker() -> None:
    r = capture_record(WHEN, "application/json", JSON_IN, "text/csv", b"0\n", event_id="e1")
    assert r == {
        "captureData": {
            "endpointInput": {
                "observedContentType": "application/json",
                "mode": "INPUT",
                "data": JSON_IN.decode(),
                "encoding": "JSON",
            },
            "endpointOutput": {"observedContentType": "text/csv", "mode": "OUTPUT", "data": "0\n", "encoding": "CSV"},
        },
        "eventMetadata": {"eventId": "e1", "inferenceTime": "2026-11-30T09:05:07.123Z"},
        "eventVersion": "0",
    }


def test_binary_and_undecodable_bodies_are_base64() -> None:
    npy = b"\x93NUMPY\x01\x00"
    r = capture_record(WHEN, "application/x-npy", npy, "application/json", b"\xff\xfe")
    assert r["captureData"]["endpointInput"]["encoding"] == "BASE64"
    assert base64.b64decode(r["captureData"]["endpointInput"]["data"]) == npy
    assert r["captureData"]["endpointOutput"]["encoding"] == "BASE64"  # not UTF-8 even if labelled JSON


def test_input_only_record() -> None:
    r = capture_record(WHEN, "application/json", JSON_IN, None, None)
    assert set(r["captureData"]) == {"endpointInput"}


def test_partition_is_hourly_utc() -> None:
    assert partition("iris", 3, WHEN) == "iris/3/2026/11/30/09"


def records(root: Path) -> list[dict[str, object]]:
    out = []
    for f in sorted(root.rglob("*.jsonl")):
        out += [json.loads(line) for line in f.read_text().splitlines()]
    return out


def test_writer_publishes_whole_files_on_close(tmp_path: Path) -> None:
    w = CaptureWriter(CaptureConfig(destination=str(tmp_path), flush_seconds=3600), now=lambda: WHEN)
    w.start()
    for _ in range(7):
        assert w.offer_bytes("iris", 2, "application/json", JSON_IN, "application/json", JSON_OUT)
    w.close()
    files = list(tmp_path.rglob("*.jsonl"))
    assert len(files) == 1
    assert files[0].parent == tmp_path / "iris" / "2" / "2026" / "11" / "30" / "09"
    assert not list(tmp_path.rglob("*.tmp"))  # nothing half-written is left visible
    assert len(records(tmp_path)) == 7
    assert w.captured == 7 and w.dropped == 0


def test_modes(tmp_path: Path) -> None:
    cfg = CaptureConfig(destination=str(tmp_path), capture_output=False)
    w = CaptureWriter(cfg, now=lambda: WHEN)
    w.start()
    w.offer_bytes("m", 1, "application/json", JSON_IN, "application/json", JSON_OUT)
    w.close()
    (rec,) = records(tmp_path)
    assert set(rec["captureData"]) == {"endpointInput"}  # type: ignore[arg-type]


def test_sampling_is_binomial(tmp_path: Path) -> None:
    w = CaptureWriter(CaptureConfig(destination=str(tmp_path), sampling_percentage=10, seed=7), now=lambda: WHEN)
    w.start()
    n = 5000
    kept = sum(w.offer_bytes("m", 1, "application/json", JSON_IN, "application/json", JSON_OUT) for _ in range(n))
    w.close()
    # 10% of 5000 = 500, sd = sqrt(5000 * 0.1 * 0.9) ~ 21: five sd either side
    assert 395 <= kept <= 605
    assert len(records(tmp_path)) == kept
    assert w.sampled_out == n - kept


def test_full_buffer_drops_and_counts_without_blocking(tmp_path: Path) -> None:
    w = CaptureWriter(CaptureConfig(destination=str(tmp_path), buffer_records=10), now=lambda: WHEN)
    # not started: nothing drains, so the buffer fills and further offers are refused at once
    results = [w.offer_bytes("m", 1, "application/json", JSON_IN, "application/json", JSON_OUT) for _ in range(25)]
    assert results.count(True) == 10
    assert w.dropped == 15
    w.start()
    w.close()
    assert len(records(tmp_path)) == 10


def test_files_rotate_after_flush_seconds(tmp_path: Path) -> None:
    clock = [0.0]
    w = CaptureWriter(
        CaptureConfig(destination=str(tmp_path), flush_seconds=1.0), now=lambda: WHEN, monotonic=lambda: clock[0]
    )
    from servekit.serving.capture.sink import _Item

    w._write(_Item(WHEN, "m", 1, "application/json", JSON_IN, None, None))
    w._rotate(force=False)
    assert not list(tmp_path.rglob("*.jsonl"))  # still open
    clock[0] = 1.5
    w._rotate(force=False)
    assert len(list(tmp_path.rglob("*.jsonl"))) == 1
    w._write(_Item(WHEN, "m", 1, "application/json", JSON_IN, None, None))
    w._rotate(force=True)
    assert len(list(tmp_path.rglob("*.jsonl"))) == 2


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"sampling_percentage": 101}, "0..100"),
        ({"capture_input": False, "capture_output": False}, "at least one"),
        ({"buffer_records": 0}, "buffer_records"),
        ({"destination": ""}, "destination"),
    ],
)
def test_config_validation(kwargs: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        CaptureConfig(**{"destination": "/tmp/x", **kwargs})  # type: ignore[arg-type]


def test_a_failed_publish_neither_kills_capture_nor_hangs_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os as os_module

    real_replace = os_module.replace
    failures = [1]

    def flaky_replace(src: object, dst: object) -> None:
        if failures:
            failures.pop()
            raise OSError(28, "No space left on device")
        real_replace(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr("servekit.serving.capture.sink.os.replace", flaky_replace)
    clock = [0.0]
    w = CaptureWriter(
        CaptureConfig(destination=str(tmp_path), buffer_records=5, flush_seconds=1.0),
        now=lambda: WHEN,
        monotonic=lambda: clock[0],
    )
    from servekit.serving.capture.sink import _Item

    w._write(_Item(WHEN, "m", 1, "application/json", JSON_IN, None, None))
    w._rotate(force=True)  # this publish fails
    assert w.dropped == 1 and w.captured == 0
    w.start()
    for _ in range(3):
        assert w.offer_bytes("m", 1, "application/json", JSON_IN, "application/json", JSON_OUT)
    w.close(timeout=10)
    assert not w._thread.is_alive()
    assert len(records(tmp_path)) == 3  # the thread lived on and published the rest


def test_tensors_are_captured_as_v2_json_that_the_monitor_reads(tmp_path: Path) -> None:
    from servekit.serving.capture.decode import decode_record

    w = CaptureWriter(CaptureConfig(destination=str(tmp_path)), now=lambda: WHEN)
    w.start()
    x = np.array([[1.5, 2.0], [3.0, 4.25]], dtype=np.float32)
    names = np.array([b"a", b"b"], dtype=object)
    assert w.offer_tensors("m", 3, {"X": x}, {"label": np.array([1, 0], dtype=np.int64), "name": names})
    w.close()
    (line,) = [ln for f in tmp_path.rglob("*.jsonl") for ln in f.read_text().splitlines()]
    record = json.loads(line)
    inp = json.loads(record["captureData"]["endpointInput"]["data"])
    assert inp == {"inputs": [{"name": "X", "datatype": "FP32", "shape": [2, 2], "data": [1.5, 2.0, 3.0, 4.25]}]}
    out = json.loads(record["captureData"]["endpointOutput"]["data"])
    assert out["outputs"] == [
        {"name": "label", "datatype": "INT64", "shape": [2], "data": [1, 0]},
        {"name": "name", "datatype": "BYTES", "shape": [2], "data": ["a", "b"]},
    ]
    _, rows = decode_record(line)  # type: ignore[misc]
    assert rows == [[1.5, 2.0], [3.0, 4.25]]


def test_a_remote_destination_gets_whole_files_through_storage(tmp_path: Path) -> None:
    from servekit.testing import InMemoryStorage

    store = InMemoryStorage()
    cfg = CaptureConfig(destination="mem://bucket/capture", flush_seconds=3600)
    w = CaptureWriter(cfg, now=lambda: WHEN, storage=store, staging=tmp_path / "staging")
    w.start()
    for _ in range(3):
        assert w.offer_bytes("iris", 2, "application/json", JSON_IN, "application/json", JSON_OUT)
    w.close()
    (published,) = [f.uri for f in store.list("mem://bucket/capture", recursive=True)]
    assert published.startswith("mem://bucket/capture/iris/2/2026/11/30/09/")
    with store.open(published) as fh:
        assert len(fh.read().splitlines()) == 3
    assert not list((tmp_path / "staging").rglob("*.tmp"))  # the staged copy is gone once uploaded
