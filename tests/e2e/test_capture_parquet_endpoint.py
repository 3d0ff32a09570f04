"""Parquet capture on a ``servekit up`` endpoint, end to end with boto3: the endpoint config's tag
``servekit:CaptureFormat=parquet`` makes its instances write servekit's Parquet layout (a column per feature, the
variant and inference id beside them) in SageMaker's ``<destination>/<endpoint>/<variant>/yyyy/mm/dd/hh/``
partitions, and ``servekit monitor run`` reads that capture back and finds the one feature that was shifted."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from botocore.exceptions import ClientError
from scipy import stats

from servekit.testing.hosting import UpProcess

pytestmark = pytest.mark.e2e
FAST = {"Delay": 1, "MaxAttempts": 120}


@pytest.fixture
def up(tmp_path: Path) -> Iterator[UpProcess]:
    u = UpProcess(tmp_path / "home")
    u.start()
    try:
        yield u
    finally:
        u.stop()


def iso(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def monitor(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "servekit.cli.main", "monitor", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_an_endpoint_captures_parquet_that_the_monitor_reads(up: UpProcess, tmp_path: Path) -> None:
    from sklearn.datasets import load_iris

    from servekit.tools.demo.build import IRIS_FEATURES, iris_onnx

    sm, rt = up.sm(), up.rt()
    iris_onnx(tmp_path / "iris" / "1")
    sm.create_model(ModelName="iris-m", PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(tmp_path / "iris")})
    capture = tmp_path / "capture"
    variant = {"VariantName": "A", "ModelName": "iris-m", "InitialInstanceCount": 1, "InstanceType": "ml.m5.large"}
    data_capture = {
        "EnableCapture": True,
        "InitialSamplingPercentage": 100,
        "DestinationS3Uri": f"file://{capture}",
        "CaptureOptions": [{"CaptureMode": "Input"}, {"CaptureMode": "Output"}],
    }

    # a bad format, or the tag without capture, is refused where the config is made
    for tags, kwargs, message in (
        ([{"Key": "servekit:CaptureFormat", "Value": "csv"}], {"DataCaptureConfig": data_capture}, "jsonl or parquet"),
        ([{"Key": "servekit:CaptureFormat", "Value": "parquet"}], {}, "needs a DataCaptureConfig"),
    ):
        with pytest.raises(ClientError) as err:
            sm.create_endpoint_config(EndpointConfigName="bad", ProductionVariants=[variant], Tags=tags, **kwargs)
        assert err.value.response["Error"]["Code"] == "ValidationException"
        assert message in err.value.response["Error"]["Message"]

    sm.create_endpoint_config(
        EndpointConfigName="iris-cfg",
        ProductionVariants=[variant],
        DataCaptureConfig=data_capture,
        Tags=[{"Key": "servekit:CaptureFormat", "Value": "parquet"}],
    )
    described = sm.describe_endpoint_config(EndpointConfigName="iris-cfg")["DataCaptureConfig"]
    assert set(described) == set(data_capture)  # SageMaker's fields only; the format rides on the tag
    start = time.time()
    sm.create_endpoint(EndpointName="iris", EndpointConfigName="iris-cfg")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="iris", WaiterConfig=FAST)

    # the iris rows with sepal_length moved by three of its standard deviations, ten rows a request
    x, _ = load_iris(return_X_y=True)
    live = x.copy()
    live[:, 0] += 3 * x[:, 0].std()
    for i in range(0, len(live), 10):
        out = rt.invoke_endpoint(
            EndpointName="iris",
            Body=json.dumps(live[i : i + 10].tolist()),
            ContentType="application/json",
            InferenceId=f"req-{i}",
        )
        assert len(json.loads(out["Body"].read())["predictions"]) == len(live[i : i + 10])

    def captured_rows() -> int:
        return sum(pq.read_metadata(f).num_rows for f in capture.rglob("*.parquet"))

    deadline = time.monotonic() + 60
    while captured_rows() < len(live) and time.monotonic() < deadline:  # the writer publishes every few seconds
        time.sleep(0.2)
    files = sorted(capture.rglob("*.parquet"))
    assert files and captured_rows() == len(live)
    assert not list(capture.rglob("*.jsonl"))
    assert all(
        f.relative_to(capture).parts[:2] == ("iris", "A") and len(f.relative_to(capture).parts) == 7 for f in files
    )
    table = pq.read_table(files[0])
    assert table.schema.metadata[b"servekit.capture"] == b"1"
    feature_columns = [c for c in table.column_names if c.startswith("input.")]
    assert len(feature_columns) == 4  # a column per feature of the [N, 4] input tensor
    assert {r["variant"] for r in table.to_pylist()} == {"A"}
    assert {r["inferenceId"] for r in table.to_pylist()} <= {f"req-{i}" for i in range(0, 150, 10)}

    # the monitor reads the Parquet capture as it reads JSON Lines: one window over the traffic
    (tmp_path / "train.csv").write_text(
        ",".join(IRIS_FEATURES) + "\n" + "".join(",".join(f"{v:g}" for v in row) + "\n" for row in x)
    )
    made = monitor("baseline", "--data", str(tmp_path / "train.csv"), "--out", str(tmp_path / "base"))
    assert made.returncode == 0, made.stdout + made.stderr
    since, until = math.floor(start), math.ceil(time.time()) + 1
    span = until - since
    ran = monitor(
        "run", "--baseline", str(tmp_path / "base"), "--data", str(capture / "iris"), "--out", str(tmp_path / "out"),
        "--since", iso(since), "--until", iso(until), "--window", f"{span}s", "--step", f"{math.gcd(until, span)}s",
        "--no-report",
    )  # fmt: skip
    assert ran.returncode in (0, 3), ran.stdout + ran.stderr  # 3: drift found
    [window] = json.loads((tmp_path / "out" / "metrics.json").read_text())["windows"]
    assert window["rows"] == len(live)
    drifted = {name for name, f in window["features"].items() if f["drifted"]}
    assert drifted == {"sepal_length"}, window["features"]
    # exactly the values the model saw: its float32 input tensor (float32(0.2) > 0.2, so even an unshifted
    # feature with many ties differs from the float64 training file by a KS that scipy reproduces)
    for j, name in enumerate(IRIS_FEATURES):
        seen = live[:, j].astype(np.float32).astype(np.float64)
        expected = stats.ks_2samp(x[:, j], seen, method="auto").statistic
        assert window["features"][name]["metrics"]["ks_statistic"] == pytest.approx(expected, abs=1e-9), name
