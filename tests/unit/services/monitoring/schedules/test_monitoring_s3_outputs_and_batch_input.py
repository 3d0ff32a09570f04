"""A job definition's output in servekit up's own S3 store (written locally, then put into the store under the URI
with SageMaker's layout) and its ``BatchTransformInput`` (a batch transform's capture manifests turned into capture
records for the monitor), without a plane: the store is a folder per bucket behind the resolver the plane hands in."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from servekit.services.monitoring.schedules.batch import (
    BatchInput,
    BatchInputError,
    batch_input,
    manifest_uris,
    manifests,
    stage,
    stamp,
)
from servekit.services.monitoring.schedules.jobs import (
    JobSpecError,
    MonitoringType,
    output_folder,
    spec_from_definition,
    spec_from_inline,
)
from servekit.services.monitoring.schedules.locations import locate, output_location, publish, published_uri
from servekit.serving.capture.decode import decode_record

BUCKET = "sagemaker-us-east-1-000000000000"


def store(tmp_path: Path) -> tuple[Path, Any]:
    """A store of one bucket: ``s3://BUCKET/key`` is ``<root>/BUCKET/key`` (None for another bucket or a missing
    key), as the plane's resolver answers."""
    root = tmp_path / "s3"
    (root / BUCKET).mkdir(parents=True)

    def objects(uri: str) -> Path | None:
        bucket, _, key = uri.removeprefix("s3://").partition("/")
        if bucket != BUCKET:
            return None
        path = root / bucket / key.rstrip("/")
        return path if path.exists() else None

    return root, objects


def baseline(tmp_path: Path) -> Path:
    folder = tmp_path / "baseline"
    folder.mkdir()
    (folder / "baseline.json").write_text("{}")
    return folder


def definition(output: str, job_input: dict[str, Any], base: Path) -> dict[str, Any]:
    return {
        "JobDefinitionName": "dq",
        "DataQualityBaselineConfig": {"ConstraintsResource": {"S3Uri": f"file://{base}"}},
        "DataQualityAppSpecification": {"ImageUri": "servekit"},
        "DataQualityJobInput": job_input,
        "DataQualityJobOutputConfig": {
            "MonitoringOutputs": [{"S3Output": {"S3Uri": output, "LocalPath": "/opt/ml/processing/output"}}]
        },
        "RoleArn": "arn:aws:iam::000000000000:role/r",
    }


ENDPOINT = {"EndpointInput": {"EndpointName": "churn", "LocalPath": "/opt/ml/processing/input"}}


def batch(destination: str, fmt: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "BatchTransformInput": {
            "DataCapturedDestinationS3Uri": destination,
            "DatasetFormat": fmt or {"Csv": {"Header": False}},
            "LocalPath": "/opt/ml/processing/input",
            "StartTimeOffset": "-PT2H",
        }
    }


# ---------------------------------------------------------------------------------------------- outputs
def test_an_s3_output_of_the_planes_store_is_written_under_the_home_and_named_by_its_uri(tmp_path: Path) -> None:
    _, objects = store(tmp_path)
    scratch = tmp_path / "outputs"
    uri = f"s3://{BUCKET}/integ-test-monitoring-output-bucket/run-1"
    spec = spec_from_definition(
        MonitoringType.DATA_QUALITY, definition(uri, ENDPOINT, baseline(tmp_path)), objects, scratch
    )
    assert spec.output == str(scratch / BUCKET / "integ-test-monitoring-output-bucket" / "run-1")
    assert spec.output_uri == uri
    fire = datetime(2026, 12, 5, 9, 0, tzinfo=UTC).timestamp()
    folder = output_folder(spec, "sched", fire, compressed=False)
    assert folder == f"{spec.output}/churn/sched/2026/12/05/09"
    assert published_uri(spec.output, spec.output_uri, folder) == f"{uri}/churn/sched/2026/12/05/09"
    assert published_uri("/r", "", "/r/churn/s/2026") == "file:///r/churn/s/2026"  # a local output stays one


def test_an_s3_output_elsewhere_or_without_a_store_is_refused_with_the_reason(tmp_path: Path) -> None:
    _, objects = store(tmp_path)
    base = baseline(tmp_path)
    with pytest.raises(JobSpecError, match="is not in servekit up's own S3 store"):
        spec_from_definition(
            MonitoringType.DATA_QUALITY, definition("s3://someone-else/out", ENDPOINT, base), objects, tmp_path
        )
    with pytest.raises(JobSpecError, match="is not in servekit up's own S3 store"):  # no place to write first
        spec_from_definition(MonitoringType.DATA_QUALITY, definition(f"s3://{BUCKET}/out", ENDPOINT, base), objects)
    with pytest.raises(JobSpecError, match=r"\. or \.\. segments"):
        output_location(f"s3://{BUCKET}/a/../b", "S3Uri", objects, tmp_path)
    with pytest.raises(JobSpecError, match="must be a local path or file:// URI"):
        output_location("https://example.com/out", "S3Uri", objects, tmp_path)


def test_publishing_puts_each_file_at_its_relative_key_but_the_skipped_ones(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "windows" / "w1").mkdir(parents=True)
    (out / "constraint_violations.json").write_text("{}")
    (out / "servekit-monitor.log").write_text("ok")
    (out / "windows" / "w1" / "constraint_violations.json").write_text("{}")
    (out / ".batch-capture" / "2026").mkdir(parents=True)
    (out / ".batch-capture" / "2026" / "r.jsonl").write_text("{}")
    put: dict[str, tuple[Path, str]] = {}

    def record(uri: str, path: Path, content_type: str) -> str:
        put[uri] = (path, content_type)
        return '"etag"'

    assert publish(out, "s3://b/run/", record, frozenset({".batch-capture"})) == 3
    assert put == {
        "s3://b/run/constraint_violations.json": (out / "constraint_violations.json", "application/json"),
        "s3://b/run/servekit-monitor.log": (out / "servekit-monitor.log", "text/plain"),
        "s3://b/run/windows/w1/constraint_violations.json": (
            out / "windows" / "w1" / "constraint_violations.json",
            "application/json",
        ),
    }


# ---------------------------------------------------------------------------------------------- batch input
def test_a_batch_transform_input_is_read_for_data_quality_and_answered_back_as_given(tmp_path: Path) -> None:
    _, objects = store(tmp_path)
    request = definition(f"file://{tmp_path}/out", batch(f"s3://{BUCKET}/capture/job-1"), baseline(tmp_path))
    spec = spec_from_definition(MonitoringType.DATA_QUALITY, request, objects)
    assert spec.batch == BatchInput(f"s3://{BUCKET}/capture/job-1", "csv")
    assert spec.endpoint_name == "" and spec.start_offset == "-PT2H"
    assert output_folder(spec, "s", 0.0, compressed=False) == f"{tmp_path}/out/job-1/s/1970/01/01/00"
    inline = {
        "BaselineConfig": request["DataQualityBaselineConfig"],
        "MonitoringAppSpecification": {"ImageUri": "servekit"},
        "MonitoringInputs": [batch(f"file://{tmp_path}/capture", {"Json": {"Line": True}})],
        "MonitoringOutputConfig": request["DataQualityJobOutputConfig"],
    }
    assert spec_from_inline(inline, MonitoringType.DATA_QUALITY).batch == BatchInput(
        f"file://{tmp_path}/capture", "json", lines=True
    )


def test_a_batch_input_servekit_cannot_read_is_refused_with_the_reason(tmp_path: Path) -> None:
    _, objects = store(tmp_path)
    base = baseline(tmp_path)
    out = f"file://{tmp_path}/out"
    with pytest.raises(JobSpecError, match="is not in servekit up's own S3 store"):
        spec_from_definition(MonitoringType.DATA_QUALITY, definition(out, batch("s3://other/c"), base), objects)
    with pytest.raises(JobSpecError, match="exactly one of EndpointInput and BatchTransformInput"):
        spec_from_definition(MonitoringType.DATA_QUALITY, definition(out, {**ENDPOINT, **batch("/c")}, base))
    with pytest.raises(JobSpecError, match="exactly one of Csv, Json and Parquet"):
        batch_input({"DataCapturedDestinationS3Uri": "/c", "DatasetFormat": {}}, "In")
    quality = {
        "ModelQualityBaselineConfig": {"ConstraintsResource": {"S3Uri": f"file://{base}"}},
        "ModelQualityAppSpecification": {"ImageUri": "servekit", "ProblemType": "Regression"},
        "ModelQualityJobInput": {**batch("/c"), "GroundTruthS3Input": {"S3Uri": "/labels"}},
        "ModelQualityJobOutputConfig": definition(out, ENDPOINT, base)["DataQualityJobOutputConfig"],
    }
    with pytest.raises(JobSpecError, match="for data quality only"):
        spec_from_definition(MonitoringType.MODEL_QUALITY, quality)


def write_capture(root: Path, hour: datetime, name: str, prefix: str, keys: list[str]) -> None:
    folder = root / "input" / hour.strftime("%Y/%m/%d/%H")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps([{"prefix": prefix}, *keys]))


def test_the_manifests_of_the_hours_overlapping_the_window_are_read_and_their_files_staged(tmp_path: Path) -> None:
    root, objects = store(tmp_path)
    data = root / BUCKET / "transform-in"
    data.mkdir()
    (data / "a.csv").write_text("x,y\n1.0,2.0\n3.0,4.0\n")
    (data / "b.csv").write_text("x,y\n5.0,6.0\n")
    capture = root / BUCKET / "capture"
    at_9 = datetime(2026, 12, 5, 9, tzinfo=UTC)
    at_7 = datetime(2026, 12, 5, 7, tzinfo=UTC)
    write_capture(capture, at_9, "m.json", f"s3://{BUCKET}/transform-in", ["a.csv", "b.csv"])
    write_capture(capture, at_7, "old.json", f"s3://{BUCKET}/transform-in/", ["a.csv"])
    (capture / "input" / "2026" / "12" / "05" / "09" / ".m.json.tmp").write_text("[")  # a writer's temporary file

    since, until = at_9.timestamp() - 1800, at_9.timestamp() + 1800  # 08:30 to 09:30
    assert [h for h, _ in manifests(capture, since, until)] == [at_9.timestamp()]
    spec = BatchInput(f"s3://{BUCKET}/capture", "csv", header=True)
    dest = tmp_path / "staged"
    assert stage(spec, lambda uri: locate(uri, objects), since, until, dest) == 2
    [staged] = list(dest.rglob("*.jsonl"))
    assert staged.parent == dest / "2026" / "12" / "05" / "09"
    decoded = [decode_record(line) for line in staged.read_text().splitlines()]
    assert decoded == [(at_9.timestamp(), [["1.0", "2.0"], ["3.0", "4.0"]]), (at_9.timestamp(), [["5.0", "6.0"]])]

    # nothing in the window, or nothing captured there yet: nothing staged
    assert stage(spec, lambda uri: locate(uri, objects), until + 3600, until + 7200, tmp_path / "none") == 0
    nowhere = BatchInput(f"s3://{BUCKET}/not-yet", "csv")
    assert stage(nowhere, lambda uri: locate(uri, objects), since, until, tmp_path / "none") == 0

    # a manifest naming a file that is not there says which
    write_capture(capture, at_9, "n.json", f"s3://{BUCKET}/transform-in", ["gone.csv"])
    with pytest.raises(BatchInputError, match=r"transform-in/gone\.csv, listed in the batch capture manifest"):
        stage(spec, lambda uri: locate(uri, objects), since, until, tmp_path / "bad")


def test_records_keep_json_lines_and_are_stamped_inside_the_window(tmp_path: Path) -> None:
    capture = tmp_path / "capture"
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "r.jsonl").write_text('{"x": 1.5}\n{"x": 2.5}\n')
    hour = datetime(2026, 12, 5, 9, tzinfo=UTC)
    write_capture(capture, hour, "m.json", f"file://{tmp_path}/in", ["r.jsonl"])
    since = hour.timestamp() + 600  # the window starts inside the manifest's hour: its records move in
    until = since + 60
    spec = BatchInput(f"file://{capture}", "json", lines=True)
    assert stage(spec, lambda uri: locate(uri, lambda _: None), since, until, tmp_path / "out") == 1
    [staged] = list((tmp_path / "out").rglob("*.jsonl"))
    assert decode_record(staged.read_text().strip()) == (since, [{"x": 1.5}, {"x": 2.5}])
    assert stamp(hour.timestamp(), since, until) == since
    assert stamp(hour.timestamp(), hour.timestamp() - 10, hour.timestamp() + 10) == hour.timestamp()
    assert stamp(hour.timestamp(), since, since) == since  # an empty window: its start
    with pytest.raises(BatchInputError, match="is not a batch capture manifest"):
        manifest_uris('{"prefix": "s3://b/"}', "m.json")
