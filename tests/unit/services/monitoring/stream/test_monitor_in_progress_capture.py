"""``servekit monitor run`` says how many capture records it could not read yet: those in a capture writer's hidden
``.<name>.jsonl.tmp`` files (not yet published) are counted, never read, and named in a warning, or in the error
when nothing else is there."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

from servekit.cli.main import app
from servekit.services.monitoring.stream.sources import SourceError, SourceStats, list_files
from servekit.services.monitoring.stream.windows import parse_time
from servekit.storage import Storage
from servekit.testing.capture_files import capture_record, write_capture_files

runner = CliRunner()
T0 = parse_time("2026-11-30T09:00:00Z")


def in_progress(folder: Path, records: int) -> Path:
    """What the capture writer has open: a hidden file in the partition, records appended line by line."""
    lines = [orjson.dumps(capture_record(T0 + 1800 + i, [[0.5]])) + b"\n" for i in range(records)]
    path = folder / ".30-00-4242-0123456789ab.jsonl.tmp"
    path.write_bytes(b"".join(lines))
    return path


def test_the_listing_counts_records_still_being_written_and_reads_none_of_them(tmp_path: Path) -> None:
    (done,) = write_capture_files(tmp_path / "cap", [(T0 + i, [[0.1 * i]]) for i in range(5)])
    in_progress(done.parent, 3)
    (tmp_path / "cap" / ".cache").mkdir()
    (tmp_path / "cap" / ".cache" / ".other.tmp").write_bytes(b"x\n")  # a hidden folder's files are not capture's
    stats = SourceStats()
    assert list_files(str(tmp_path / "cap"), Storage(), stats) == [str(done)]
    assert (stats.in_progress_files, stats.in_progress_records) == (1, 3)
    warning = stats.in_progress_warning()
    assert warning is not None and warning.startswith("3 record(s) in 1 capture file(s) still being written")
    assert SourceStats().in_progress_warning() is None


def test_only_unpublished_capture_is_an_error_that_counts_it(tmp_path: Path) -> None:
    folder = tmp_path / "cap" / "model" / "1" / "2026" / "11" / "30" / "09"
    folder.mkdir(parents=True)
    in_progress(folder, 4)
    with pytest.raises(SourceError, match=r"holds no files: 4 record\(s\) in 1 capture file\(s\) still being"):
        list_files(str(tmp_path / "cap"), Storage())


def test_monitor_run_warns_of_the_records_it_could_not_read_yet(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    (tmp_path / "train.csv").write_text("a\n" + "\n".join(f"{v:.5f}" for v in rng.normal(size=2000)) + "\n")
    made = runner.invoke(
        app, ["monitor", "baseline", "--data", str(tmp_path / "train.csv"), "--out", str(tmp_path / "b")]
    )
    assert made.exit_code == 0, made.output
    (done,) = write_capture_files(
        tmp_path / "cap", [(T0 + i, [[float(v)]]) for i, v in enumerate(rng.normal(size=300))]
    )
    in_progress(done.parent, 7)
    args = ["monitor", "run", "--baseline", str(tmp_path / "b"), "--data", str(tmp_path / "cap"), "--out"]
    r = runner.invoke(app, [*args, str(tmp_path / "o"), "--window", "1h"])
    assert r.exit_code == 0, r.output
    assert "warning: 7 record(s) in 1 capture file(s) still being written" in r.stderr
    assert "run again to include them" in r.stderr
    done.unlink()
    r = runner.invoke(app, [*args, str(tmp_path / "o2"), "--window", "1h"])
    assert r.exit_code == 1 and "holds no files: 7 record(s) in 1 capture file(s)" in r.stderr
