"""An endpoint's instances capture in SageMaker's layout <dest>/<endpoint>/<variant>/yyyy/mm/dd/hh/, and the
monitor's reader decodes what they wrote."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from servekit.config.models import CaptureConfig
from servekit.errors import ConfigError
from servekit.serving.capture.decode import decode_record
from servekit.serving.capture.record import partition
from servekit.serving.capture.sink import CaptureWriter

WHEN = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)


def test_partition_with_a_prefix_replaces_model_and_version() -> None:
    assert partition("m", 3, WHEN) == "m/3/2024/05/06/07"
    assert partition("m", 3, WHEN, "ep/AllTraffic") == "ep/AllTraffic/2024/05/06/07"


@pytest.mark.parametrize("prefix", ["", "/ep/A", "ep/../A", "ep//A", "ep/A/", ".", "ep\\A"])
def test_a_prefix_that_is_not_plain_relative_folders_is_refused(prefix: str) -> None:
    with pytest.raises(ConfigError, match="partition_prefix"):
        CaptureConfig(destination="/tmp/c", partition_prefix=prefix)


def test_the_writer_lays_files_out_under_the_prefix_and_the_monitor_reads_them(tmp_path: Path) -> None:
    cfg = CaptureConfig(destination=f"file://{tmp_path}", partition_prefix="ep/A")
    writer = CaptureWriter(cfg, now=lambda: WHEN)
    writer.start()
    writer.offer_bytes("m", 1, "application/json", b"[[1, 2]]", "application/json", b'{"out": [3]}')
    writer.close()
    files = sorted((tmp_path / "ep" / "A" / "2024" / "05" / "06" / "07").glob("*.jsonl"))
    assert len(files) == 1
    assert not list(tmp_path.glob("m/**/*"))
    decoded = decode_record(files[0].read_bytes().splitlines()[0])
    assert decoded is not None and decoded[1] == [[1, 2]]
