"""Shadow comparison: output differences (labels, numbers, shapes, non-JSON), the report over records, and the
record log's layout and round trip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servekit.gateway.service import ShadowResult
from servekit.gateway.shadow import ShadowLog, compare_outputs, read_records, summarise


def result(prod: bytes, shadow: bytes, ps: float = 0.010, ss: float = 0.020, status: int = 200) -> ShadowResult:
    return ShadowResult(
        "ep", "AllTraffic", "Shadow", "id-1", b"[1.0]", "application/json", 200, prod, ps, status, shadow, ss, 0.0
    )


def test_labels_and_numbers_compared_leaf_by_leaf() -> None:
    a = json.dumps({"predictions": [{"label": "cat", "score": 0.9}, {"label": "dog", "score": 0.2}]}).encode()
    same_labels = json.dumps({"predictions": [{"label": "cat", "score": 0.8}, {"label": "dog", "score": 0.5}]})
    c = compare_outputs(a, same_labels.encode())
    assert c.comparable and c.labels_agree is True
    assert c.abs_diffs == pytest.approx((0.1, 0.3))
    other = json.dumps({"predictions": [{"label": "cow", "score": 0.9}, {"label": "dog", "score": 0.2}]})
    assert compare_outputs(a, other.encode()).labels_agree is False


def test_different_shapes_and_non_json() -> None:
    assert not compare_outputs(b"[1, 2]", b"[1, 2, 3]").comparable
    assert compare_outputs(b"[1, 2]", b"[1, 2]").labels_agree is None  # numbers only: nothing to agree on
    plain = compare_outputs(b"\x00binary", b"\x00binary")
    assert plain.comparable and plain.labels_agree is True
    assert compare_outputs(b"\x00binary", b"\x00other").labels_agree is False


def test_the_report_over_logged_records(tmp_path: Path) -> None:
    log = ShadowLog(tmp_path)
    for i in range(100):
        log(result(json.dumps({"out": [float(i)]}).encode(), json.dumps({"out": [i + 0.5]}).encode(), ss=0.001 * i))
    log(result(b'{"out": [1.0]}', b"model raised", status=500))
    files = list(tmp_path.glob("ep/Shadow/1970/01/01/00/00.jsonl"))
    assert len(files) == 1  # the capture layout: endpoint/variant/yyyy/mm/dd/hh/MM.jsonl
    report = summarise(read_records(tmp_path, "ep"))
    assert report["requests"] == 101 and report["shadow_errors"] == 1 and report["production_errors"] == 0
    assert report["outputs"]["compared"] == 100
    assert report["outputs"]["max_abs_diff"] == pytest.approx(0.5)
    assert report["outputs"]["mean_abs_diff"] == pytest.approx(0.5)
    assert report["latency_ms"]["production"]["p50"] == pytest.approx(10.0)
    # nearest rank over 0..99 ms plus the failed copy's 20 ms: the 100th and 51st smallest of 101
    assert report["latency_ms"]["shadow"]["p99"] == pytest.approx(98.0)
    assert report["latency_ms"]["shadow"]["p50"] == pytest.approx(49.0)


def test_binary_bodies_survive_the_log(tmp_path: Path) -> None:
    log = ShadowLog(tmp_path)
    log(result(b"\xff\x00", b"\xff\x01"))
    (record,) = list(read_records(tmp_path, "ep", "Shadow"))
    assert record["production"]["encoding"] == "BASE64"
    assert summarise([record])["outputs"]["label_agreement"] == 0.0
    assert list(read_records(tmp_path, "ep", "Other")) == [] and list(read_records(tmp_path, "nope")) == []
