"""A transform job's DataCaptureConfig: SageMaker's manifests of the objects it read and wrote, under
``<destination>/{input,output}/yyyy/mm/dd/hh/``, which Model Monitor's BatchTransformInput reader takes back."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from servekit.services.monitoring.schedules.batch import manifest_uris, manifests
from servekit.services.transform.capture import capture_uris, write_capture
from servekit.services.transform.capture import manifests as capture_manifests
from servekit.services.transform.objects import InputObject

STARTED = datetime(2026, 12, 5, 13, 42, 7, tzinfo=UTC).timestamp()


def test_manifests_name_each_object_under_its_prefix_and_its_out_object() -> None:
    objects = [
        InputObject("s3://b/in/part-1.csv", "part-1.csv", 10),
        InputObject("s3://b/in/sub/part-0.csv", "sub/part-0.csv", 10),
        InputObject("s3://c/other.csv", "other.csv", 5),  # a manifest input may read from elsewhere
    ]
    got = capture_manifests(objects, "s3://b/out/")
    assert got["input"] == [
        [{"prefix": "s3://b/in/"}, "part-1.csv", "sub/part-0.csv"],
        [{"prefix": "s3://c/"}, "other.csv"],
    ]
    assert got["output"] == [[{"prefix": "s3://b/out/"}, "other.csv.out", "part-1.csv.out", "sub/part-0.csv.out"]]
    assert capture_uris("s3://b/cap/", "input", "job", STARTED, 1) == ["s3://b/cap/input/2026/12/05/13/job.json"]
    assert capture_uris("s3://b/cap", "output", "job", STARTED, 2) == [
        "s3://b/cap/output/2026/12/05/13/job-0.json",
        "s3://b/cap/output/2026/12/05/13/job-1.json",
    ]


def test_the_written_capture_is_what_model_monitor_reads_back(tmp_path: Path) -> None:
    data = tmp_path / "in"
    data.mkdir()
    (data / "a.csv").write_text("1,2\n")
    objects = [InputObject(f"{data}/a.csv", "a.csv", 4)]
    destination = tmp_path / "capture"
    assert write_capture(str(destination), "job-1", STARTED, objects, str(tmp_path / "out")) == 2
    written = destination / "input" / "2026" / "12" / "05" / "13" / "job-1.json"
    assert json.loads(written.read_text()) == [{"prefix": f"{data}/"}, "a.csv"]
    output = destination / "output" / "2026" / "12" / "05" / "13" / "job-1.json"
    assert json.loads(output.read_text()) == [{"prefix": f"{tmp_path}/out/"}, "a.csv.out"]
    # the monitor's reader finds it in a window over that hour, and resolves the file it names
    [(hour, found)] = list(manifests(destination, STARTED - 60, STARTED + 60))
    assert found == written and hour == datetime(2026, 12, 5, 13, tzinfo=UTC).timestamp()
    assert manifest_uris(found.read_text(), str(found)) == [f"{data}/a.csv"]
