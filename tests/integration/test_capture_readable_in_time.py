"""Captured records are readable within 5 s (the default flush_seconds) of the request, with no traffic after it,
and until then ``servekit monitor``'s listing counts them as still being written. Polled with a deadline: the old
writer sealed a file 5 s after its first record at the earliest (5.0-5.5 s), so this failed there."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from tests.conftest import wait_ready

from servekit.config.models import CaptureConfig, ServerConfig
from servekit.services.monitoring.stream.sources import SourceError, SourceStats, list_files
from servekit.storage import Storage
from servekit.testing.app_client import serving_app

ROW = [5.1, 3.5, 1.4, 0.2]


def published(root: Path) -> list[Path]:
    return [p for p in root.rglob("*.jsonl") if not p.name.startswith(".")]


def unpublished(dest: Path) -> SourceStats:
    """What ``servekit monitor`` counts as still being written under ``dest`` (nothing published: an error)."""
    stats = SourceStats()
    with pytest.raises(SourceError, match="holds no files"):
        list_files(str(dest), Storage(), stats)
    return stats


def test_records_are_readable_within_five_seconds_without_further_traffic(
    demo_config: ServerConfig, tmp_path: Path
) -> None:
    dest = tmp_path / "capture"
    cfg = ServerConfig(models=demo_config.models, file_system_poll_wait_seconds=0, capture=CaptureConfig(str(dest)))
    assert cfg.capture is not None and cfg.capture.flush_seconds == 5.0  # the default
    with TestClient(serving_app(cfg), raise_server_exceptions=False) as c:
        wait_ready(c)
        first = time.monotonic()
        for _ in range(3):
            assert c.post("/v1/models/iris:predict", json={"instances": [ROW]}).status_code == 200
        stats = unpublished(dest)
        deadline = first + 3.0  # the writer appends as it goes: the listing sees them before they are published
        while stats.in_progress_records < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
            stats = unpublished(dest)
        assert (stats.in_progress_files, stats.in_progress_records) == (1, 3)
        deadline = first + 10.0
        while not published(dest) and time.monotonic() < deadline:
            time.sleep(0.05)
        readable_after = time.monotonic() - first
        (done,) = published(dest)
        assert len(done.read_bytes().splitlines()) == 3
        assert readable_after < 5.0, f"readable {readable_after:.2f} s after the first request"
        assert not list(dest.rglob(".*.tmp"))
