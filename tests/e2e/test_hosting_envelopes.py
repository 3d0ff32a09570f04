"""Endpoint envelopes on a real `servekit up` driven by boto3: data capture from DataCaptureConfig in SageMaker's
layout (read back by the monitor's reader), cost per hour (DescribeEndpoint and /metrics), a memory limit whose
breach fails the endpoint with the reason, oversubscription allowed with a warning, and SageMaker-style
model.tar.gz artifacts (served; a hostile one fails the endpoint with the artifact error)."""

from __future__ import annotations

import io
import json
import os
import tarfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest
import requests

from servekit.services.monitoring.stream.sources import SourceStats, read
from servekit.serving.capture.decode import decode_record
from servekit.testing.hosting import UpProcess

pytestmark = pytest.mark.e2e
FAST = {"Delay": 1, "MaxAttempts": 120}

INFERENCE_PY = textwrap.dedent(
    """
    import json

    def model_fn(model_dir):
        return FACTOR

    def transform_fn(model, data, content_type, accept):
        return json.dumps({"out": [[x * model for x in row] for row in json.loads(data)]}), "application/json"
    """
)

# The file's entries replace bundled types of the same name (names of its own, e.g. ml.local.tiny, work too).
TINY, SMALL = "ml.c5.large", "ml.c5.xlarge"
INSTANCE_TYPES = textwrap.dedent(
    f"""
    instance_types:
      - name: {TINY}
        vcpus: 1
        memory_gib: 0.01
        price_per_hour: 0
      - name: {SMALL}
        vcpus: 1
        memory_gib: 4
        price_per_hour: 0.25
    """
)


def handler_model(root: Path, name: str, factor: float) -> Path:
    code = root / name / "1" / "code"
    code.mkdir(parents=True)
    (code / "inference.py").write_text(INFERENCE_PY.replace("FACTOR", repr(factor)))
    return root / name


def model_tar(path: Path, factor: float, hostile: bool = False) -> Path:
    """SageMaker's model.tar.gz: the model's files at the root, the handler under code/."""
    with tarfile.open(path, "w:gz") as tar:

        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

        add("code/inference.py", INFERENCE_PY.replace("FACTOR", repr(factor)).encode())
        add("weights.txt", b"not really weights\n")
        if hostile:
            add("../escaped.py", b"print('out of the cache')\n")
    return path


@pytest.fixture
def up(tmp_path: Path) -> Iterator[UpProcess]:
    types = tmp_path / "types.yaml"
    types.write_text(INSTANCE_TYPES)
    u = UpProcess(tmp_path / "home", "--instance-types", str(types))
    u.start()
    try:
        yield u
    finally:
        u.stop()


def endpoint(
    sm: Any, name: str, model_url: str, instance_type: str, count: int = 1, capture: dict[str, Any] | None = None
) -> None:
    sm.create_model(ModelName=f"{name}-m", PrimaryContainer={"Image": "servekit", "ModelDataUrl": model_url})
    config: dict[str, Any] = {
        "EndpointConfigName": f"{name}-cfg",
        "ProductionVariants": [
            {
                "VariantName": "A",
                "ModelName": f"{name}-m",
                "InitialInstanceCount": count,
                "InstanceType": instance_type,
            }
        ],
    }
    if capture is not None:
        config["DataCaptureConfig"] = capture
    sm.create_endpoint_config(**config)
    sm.create_endpoint(EndpointName=name, EndpointConfigName=f"{name}-cfg")


def invoke(rt: Any, name: str, row: list[float]) -> list[list[float]]:
    r = rt.invoke_endpoint(EndpointName=name, Body=json.dumps([row]), ContentType="application/json")
    out: list[list[float]] = json.loads(r["Body"].read())["out"]
    return out


def describe_raw(sm: Any, name: str) -> dict[str, Any]:
    """DescribeEndpoint's JSON as sent: botocore's parser keeps only the shape's members, so servekit's extension
    fields (ServekitCostPerHour, ServekitWarnings) are read off the wire."""
    seen: list[bytes] = []

    def keep(http_response: Any, **_: Any) -> None:
        seen.append(http_response.content)

    sm.meta.events.register("after-call.sagemaker.DescribeEndpoint", keep)
    try:
        sm.describe_endpoint(EndpointName=name)
    finally:
        sm.meta.events.unregister("after-call.sagemaker.DescribeEndpoint", keep)
    doc: dict[str, Any] = json.loads(seen[-1])
    return doc


def failed_reason(sm: Any, name: str) -> str:
    with pytest.raises(botocore.exceptions.WaiterError):
        sm.get_waiter("endpoint_in_service").wait(EndpointName=name, WaiterConfig=FAST)
    desc = sm.describe_endpoint(EndpointName=name)
    assert desc["EndpointStatus"] == "Failed"
    reason: str = desc["FailureReason"]
    return reason


def test_capture_lands_in_sagemakers_layout_and_the_monitor_reads_it_and_cost_is_reported(
    up: UpProcess, tmp_path: Path
) -> None:
    sm, rt = up.sm(), up.rt()
    dest = tmp_path / "capture"
    capture = {
        "EnableCapture": True,
        "InitialSamplingPercentage": 100,
        "DestinationS3Uri": f"file://{dest}",
        "CaptureOptions": [{"CaptureMode": "Input"}, {"CaptureMode": "Output"}],
    }
    endpoint(sm, "cap", str(handler_model(tmp_path, "cap-m", 2.0)), SMALL, count=2, capture=capture)
    sm.get_waiter("endpoint_in_service").wait(EndpointName="cap", WaiterConfig=FAST)
    assert sm.describe_endpoint(EndpointName="cap")["DataCaptureConfig"]["CaptureStatus"] == "Started"
    assert describe_raw(sm, "cap")["ServekitCostPerHour"] == pytest.approx(0.5)  # 2 x SMALL at 0.25 (the file's price)
    metrics = requests.get(f"{up.url}/metrics", timeout=10).text
    assert 'servekit_endpoint_cost_per_hour{endpoint="cap"} 0.5' in metrics

    if len(os.sched_getaffinity(0)) >= 2:  # each 1-vCPU instance has a CPU of its own
        pids = [int(p.read_text()) for p in (up.home / "instances").glob("cap-*.pid")]
        cpu_sets = [os.sched_getaffinity(pid) for pid in pids]
        assert len(cpu_sets) == 2 and all(len(c) == 1 for c in cpu_sets) and cpu_sets[0] != cpu_sets[1], cpu_sets

    rows = [[float(i), float(i) + 0.5] for i in range(12)]
    assert [invoke(rt, "cap", row) for row in rows] == [[[2 * a, 2 * b]] for a, b in rows]

    sm.delete_endpoint(EndpointName="cap")  # instances stop gracefully: their capture files are closed and published
    sm.get_waiter("endpoint_deleted").wait(EndpointName="cap", WaiterConfig=FAST)
    assert 'servekit_endpoint_cost_per_hour{endpoint="cap"}' not in requests.get(f"{up.url}/metrics", timeout=10).text

    files = sorted(dest.glob("cap/A/[0-9][0-9][0-9][0-9]/[0-9][0-9]/[0-9][0-9]/[0-9][0-9]/*.jsonl"))
    assert files, sorted(str(p.relative_to(dest)) for p in dest.rglob("*"))
    assert sorted({p.relative_to(dest).parts[:2] for p in dest.rglob("*.jsonl")}) == [("cap", "A")]
    records = [json.loads(line) for f in files for line in f.read_bytes().splitlines() if line.strip()]
    assert len(records) == len(rows)
    assert all({"endpointInput", "endpointOutput"} <= set(r["captureData"]) for r in records)
    decoded = [decode_record(json.dumps(r)) for r in records]
    assert sorted(row for d in decoded if d is not None for row in d[1]) == rows

    stats = SourceStats()  # what `servekit monitor` reads for a capture source
    batches = list(read(str(dest / "cap" / "A"), stats=stats))
    assert sum(b.table.num_rows for b in batches) == len(rows) and stats.undecodable_records == 0


def test_an_instance_over_its_memory_limit_fails_the_endpoint_with_the_reason(up: UpProcess, tmp_path: Path) -> None:
    sm = up.sm()
    endpoint(sm, "fat", str(handler_model(tmp_path, "fat-m", 1.0)), TINY)
    reason = failed_reason(sm, "fat")
    assert "exceeded its memory limit" in reason and "limit 0.01 GiB" in reason, reason


def test_model_tar_gz_serves_oversubscribed_with_a_warning_and_a_hostile_archive_fails(
    up: UpProcess, tmp_path: Path
) -> None:
    sm, rt = up.sm(), up.rt()
    good = model_tar(tmp_path / "model.tar.gz", 3.0)
    endpoint(sm, "tgz", f"file://{good}", "ml.m5.12xlarge")  # 48 vCPUs, 192 GiB: more than this machine has
    sm.get_waiter("endpoint_in_service").wait(EndpointName="tgz", WaiterConfig=FAST)
    assert invoke(rt, "tgz", [1.0, 2.0]) == [[3.0, 6.0]]
    desc = describe_raw(sm, "tgz")
    assert desc["ServekitCostPerHour"] == pytest.approx(2.765)
    assert any("48 vCPUs" in w for w in desc["ServekitWarnings"]), desc.get("ServekitWarnings")
    assert "oversubscription (allowed)" in up.log.read_text()

    bad_dir = tmp_path / "bad"
    bad_dir.mkdir()
    bad = model_tar(bad_dir / "model.tar.gz", 1.0, hostile=True)
    endpoint(sm, "evil", f"file://{bad}", SMALL)
    reason = failed_reason(sm, "evil")
    assert "'../escaped.py'" in reason and "leaves the model directory" in reason, reason
    assert not list(up.home.rglob("escaped.py")) and not (tmp_path / "escaped.py").exists()
