"""Capture records become readable within flush_seconds (5 s by default) of being captured, with no further traffic:
the writer thread sleeps until the oldest open file is due and seals it early enough for its publish to fit.
Driven here by an injected monotonic clock; tests/integration/test_capture_readable_in_time.py runs it for real."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from servekit.config.models import CaptureConfig
from servekit.serving.capture.sink import CaptureWriter, _Item, seal_after

WHEN = datetime(2026, 11, 30, 9, 15, tzinfo=UTC)
BODY = b'{"instances": [[1.0, 2.0]]}'


def published(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.jsonl") if not p.name.startswith("."))


def hidden(root: Path) -> list[Path]:
    return sorted(root.rglob(".*.tmp"))


def test_a_file_is_sealed_in_time_for_its_records_to_be_readable_within_the_default_five_seconds(
    tmp_path: Path,
) -> None:
    clock = [100.0]
    w = CaptureWriter(CaptureConfig(destination=str(tmp_path)), now=lambda: WHEN, monotonic=lambda: clock[0])
    assert w.wait_seconds() is None  # nothing open: the thread waits for a record only
    w._write(_Item(WHEN, "m", 1, "application/json", BODY, None, None))
    assert w.wait_seconds() == pytest.approx(4.0)  # it sleeps until the file is due, not in polling steps
    clock[0] = 102.5
    w._write(_Item(WHEN, "m", 1, "application/json", BODY, None, None))
    assert w.wait_seconds() == pytest.approx(1.5)  # the oldest record decides
    clock[0] = 103.9
    w._rotate(force=False)
    assert published(tmp_path) == [] and len(hidden(tmp_path)) == 1
    clock[0] = 104.0  # 4 s after its first record: sealed, leaving a second of the five for the rename
    w._rotate(force=False)
    assert len(published(tmp_path)) == 1 and hidden(tmp_path) == []
    assert len(published(tmp_path)[0].read_bytes().splitlines()) == 2
    assert w.wait_seconds() is None


@pytest.mark.parametrize(("flush", "sealed"), [(5.0, 4.0), (30.0, 29.0), (2.0, 1.6), (0.5, 0.4)])
def test_the_publish_margin_is_a_second_or_a_fifth_of_a_short_interval(flush: float, sealed: float) -> None:
    assert seal_after(flush) == pytest.approx(sealed)


def test_a_failed_publish_leaves_no_hidden_file_behind(tmp_path: Path) -> None:
    from servekit.testing import InMemoryStorage

    class Refusing(InMemoryStorage):
        def put_file(self, local_path: str | Path, uri: str) -> None:
            raise PermissionError("Unable to locate credentials")

    staging = tmp_path / "staging"
    w = CaptureWriter(
        CaptureConfig(destination="mem://bucket/capture"), now=lambda: WHEN, storage=Refusing(), staging=staging
    )
    w._write(_Item(WHEN, "m", 1, "application/json", BODY, None, None))
    assert len(hidden(staging)) == 1
    w._rotate(force=True)
    assert (w.dropped, w.captured) == (1, 0)
    assert hidden(staging) == []  # it used to stay, looking as if it were still being written
