"""The rest of the hosting metrics end to end, on a real ``servekit up --metrics-resolution-s 1`` (time compressed:
one-second datapoints, two-second alarm periods) through boto3's cloudwatch client: per-instance CPU/memory
utilization and ModelSetupTime of a running endpoint, the EndpointConfigName series, Prometheus's view of them,
PutMetricData feeding an alarm, and ``servekit monitor run --publish-url`` driving an alarm on drift."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from servekit.testing.capture_files import feature_rows, synthetic_features
from servekit.testing.hosting import UpProcess, scaling_model

pytestmark = pytest.mark.e2e
FAST = {"Delay": 1, "MaxAttempts": 120}
DIMS = [{"Name": "EndpointName", "Value": "ep"}, {"Name": "VariantName", "Value": "A"}]


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    u = UpProcess(tmp_path_factory.mktemp("metrics-e2e") / "home", "--metrics-resolution-s", "1")
    u.start()
    try:
        yield u
    finally:
        u.stop()


@pytest.fixture(scope="module")
def endpoint(up: UpProcess, tmp_path_factory: pytest.TempPathFactory) -> str:
    sm = up.sm()
    base = scaling_model(tmp_path_factory.mktemp("models"), "m", 2.0)
    sm.create_model(ModelName="m", PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(base)})
    sm.create_endpoint_config(
        EndpointConfigName="cfg",
        ProductionVariants=[
            {"VariantName": "A", "ModelName": "m", "InitialInstanceCount": 1, "InstanceType": "ml.t2.medium"}
        ],
    )
    sm.create_endpoint(EndpointName="ep", EndpointConfigName="cfg")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    return "ep"


def until(check: Callable[[], Any], timeout_s: float = 20.0, what: str = "condition") -> Any:
    """Poll ``check`` until it returns something truthy (another process's state: nothing to wait on)."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout_s}s")
        time.sleep(0.2)


def window() -> dict[str, datetime]:
    now = datetime.now(UTC)
    return {"StartTime": now - timedelta(minutes=10), "EndTime": now + timedelta(minutes=1)}


def datapoints(cw: Any, namespace: str, metric: str, stat: str, period: int, dims: list[dict[str, str]]) -> list[Any]:
    got = cw.get_metric_data(
        MetricDataQueries=[
            {
                "Id": "q",
                "MetricStat": {
                    "Metric": {"Namespace": namespace, "MetricName": metric, "Dimensions": dims},
                    "Period": period,
                    "Stat": stat,
                },
            }
        ],
        **window(),
    )
    [result] = got["MetricDataResults"]
    return list(zip(result["Timestamps"], result["Values"], strict=True))


def prometheus(up: UpProcess) -> str:
    with urllib.request.urlopen(f"{up.url}/metrics", timeout=5) as r:
        return str(r.read().decode())


def test_utilization_setup_time_and_config_series(up: UpProcess, endpoint: str) -> None:
    cw, rt = up.client("cloudwatch"), up.rt()
    ns = "/aws/sagemaker/Endpoints"
    # one-second samples: a CPU value needs two of them; at 1 s resolution a 1 s period answers
    cpu = until(lambda: datapoints(cw, ns, "CPUUtilization", "Average", 1, DIMS), what="CPUUtilization")
    assert all(0.0 <= v <= 2 * 100.0 for _, v in cpu)  # ml.t2.medium: 2 vCPUs
    mem = until(lambda: datapoints(cw, ns, "MemoryUtilization", "Average", 1, DIMS), what="MemoryUtilization")
    assert all(0.0 < v < 100.0 for _, v in mem)  # a serve process holds some of its 4 GiB
    disk = datapoints(cw, ns, "DiskUtilization", "Maximum", 60, DIMS)
    assert disk and all(0.0 < v <= 100.0 for _, v in disk)
    listed = cw.list_metrics(Namespace=ns, MetricName="CPUUtilization")["Metrics"]
    names = sorted(tuple(sorted(d["Name"] for d in m["Dimensions"])) for m in listed)
    assert ("EndpointName", "InstanceId", "VariantName") in names and ("EndpointName", "VariantName") in names

    # ModelSetupTime: one instance started, its start-to-healthy time in microseconds
    setup = cw.get_metric_statistics(
        Namespace="AWS/SageMaker",
        MetricName="ModelSetupTime",
        Dimensions=DIMS,
        Period=3600,
        Statistics=["SampleCount", "Maximum"],
        **window(),
    )["Datapoints"]
    assert [p["SampleCount"] for p in setup] == [1.0]
    assert 0 < setup[0]["Maximum"] < 120e6 and setup[0]["Unit"] == "Microseconds"

    for i in range(4):
        body = rt.invoke_endpoint(EndpointName="ep", Body=json.dumps([float(i)]), ContentType="application/json")
        assert json.loads(body["Body"].read())["out"] == [2.0 * i]
    with_config = [*DIMS, {"Name": "EndpointConfigName", "Value": "cfg"}]
    for dims in (DIMS, with_config):  # the same invocations under both dimension sets
        sums = datapoints(cw, "AWS/SageMaker", "Invocations", "Sum", 3600, dims)
        assert sum(v for _, v in sums) == 4.0
    listed = cw.list_metrics(Namespace="AWS/SageMaker", MetricName="Invocations")["Metrics"]
    dimension_sets = sorted(len(m["Dimensions"]) for m in listed)
    assert dimension_sets == [2, 3]

    def scraped() -> str | None:
        text = prometheus(up)
        return text if 'servekit_endpoint_datapoint{endpoint="ep"' in text else None

    text = until(scraped, what="a latest datapoint on /metrics")  # once the invocations' bucket is flushed
    cpu_line = re.search(r'servekit_instance_cpu_utilization_percent\{[^}]*endpoint="ep"[^}]*\} (\S+)', text)
    assert cpu_line is not None and 0.0 <= float(cpu_line.group(1)) <= 200.0
    assert re.search(r'servekit_instance_memory_rss_bytes\{[^}]*endpoint="ep"[^}]*\} [1-9]', text)
    assert 'servekit_endpoint_model_setup_seconds_count{endpoint="ep",variant="A"} 1.0' in text

    # a deleted endpoint leaves every per-endpoint series of /metrics
    up.sm().delete_endpoint(EndpointName="ep")
    until(lambda: 'endpoint="ep"' not in prometheus(up), what="the deleted endpoint's series gone")


def test_put_metric_data_feeds_an_alarm_and_is_validated(up: UpProcess) -> None:
    cw = up.client("cloudwatch")
    dims = [{"Name": "EndpointName", "Value": "put-ep"}, {"Name": "VariantName", "Value": "A"}]
    cw.put_metric_alarm(
        AlarmName="put-drift",
        Namespace="servekit",
        MetricName="DriftedFeatures",
        Dimensions=dims,
        Statistic="Maximum",
        Period=2,  # a multiple of the 1 s resolution: accepted here, compressed time
        EvaluationPeriods=1,
        Threshold=0.0,
        ComparisonOperator="GreaterThanThreshold",
        TreatMissingData="notBreaching",
    )

    def state() -> str:
        return str(cw.describe_alarms(AlarmNames=["put-drift"])["MetricAlarms"][0]["StateValue"])

    until(lambda: state() == "OK", what="OK with no data (notBreaching)")
    cw.put_metric_data(
        Namespace="servekit",
        MetricData=[{"MetricName": "DriftedFeatures", "Dimensions": dims, "Value": 2.0, "StorageResolution": 1}],
    )
    until(lambda: state() == "ALARM", what="ALARM after a published 2")
    points = datapoints(cw, "servekit", "DriftedFeatures", "Maximum", 60, dims)
    assert [v for _, v in points] == [2.0]

    # Values/Counts and a statistic set land in the same series' statistics
    cw.put_metric_data(
        Namespace="servekit",
        MetricData=[
            {"MetricName": "Sizes", "Dimensions": dims, "Values": [1.0, 10.0], "Counts": [3.0, 1.0], "Unit": "Bytes"},
            {
                "MetricName": "Sizes",
                "Dimensions": dims,
                "StatisticValues": {"SampleCount": 2, "Sum": 40.0, "Minimum": 15.0, "Maximum": 25.0},
                "Unit": "Bytes",
            },
        ],
    )
    [point] = cw.get_metric_statistics(
        Namespace="servekit",
        MetricName="Sizes",
        Dimensions=dims,
        Period=3600,
        Statistics=["SampleCount", "Sum", "Minimum", "Maximum"],
        **window(),
    )["Datapoints"]
    assert (point["SampleCount"], point["Sum"], point["Minimum"], point["Maximum"]) == (6.0, 53.0, 1.0, 25.0)
    assert point["Unit"] == "Bytes"

    def refused(**params: Any) -> dict[str, Any]:
        with pytest.raises(ClientError) as err:
            cw.put_metric_data(**params)
        return dict(err.value.response["Error"])

    error = refused(Namespace="AWS/SageMaker", MetricData=[{"MetricName": "Invocations", "Value": 1.0}])
    assert error["Code"] == "InvalidParameterValue"
    assert error["Message"] == "The value AWS/ for parameter Namespace is invalid."
    error = refused(Namespace="servekit", MetricData=[{"MetricName": "x", "Value": 1.0, "Values": [1.0]}])
    assert error["Code"] == "InvalidParameterCombination"
    error = refused(
        Namespace="servekit",
        MetricData=[{"MetricName": "x", "Value": 1.0, "Timestamp": datetime.now(UTC) - timedelta(days=15)}],
    )
    assert error["Code"] == "InvalidParameterValue" and "two weeks" in error["Message"]
    error = refused(Namespace="servekit", MetricData=[{"MetricName": "x", "Values": [1.0] * 151}])
    assert error["Code"] == "InvalidParameterValue" and "150" in error["Message"]


def _write_csv(path: Path, columns: dict[str, Any], start: datetime) -> Path:
    rows = feature_rows(columns)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["ts", *columns])
        for i, r in enumerate(rows):
            stamp = (start + timedelta(seconds=i)).strftime("%Y-%m-%dT%H:%M:%SZ")
            w.writerow([stamp, *["" if v is None else v for v in r]])
    return path


def test_monitor_run_publishes_drift_that_an_alarm_watches(up: UpProcess, tmp_path: Path) -> None:
    cw = up.client("cloudwatch")
    dims = [{"Name": "EndpointName", "Value": "churn"}, {"Name": "VariantName", "Value": "AllTraffic"}]
    cw.put_metric_alarm(
        AlarmName="churn-drift",
        Namespace="servekit",
        MetricName="DriftedFeatures",
        Dimensions=dims,
        Statistic="Maximum",
        Period=2,
        EvaluationPeriods=1,
        Threshold=0.0,
        ComparisonOperator="GreaterThanThreshold",
    )
    start = datetime(2026, 11, 30, tzinfo=UTC)
    train = tmp_path / "train.csv"
    _write_csv(train, synthetic_features(3000, 1), start)
    drifted = _write_csv(tmp_path / "traffic.csv", synthetic_features(600, 2, mean_shift=3.0), start)

    def monitor(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "servekit.cli.main", "monitor", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )

    made = monitor("baseline", "--data", str(train), "--out", str(tmp_path / "baseline"), "--timestamp-column", "ts")
    assert made.returncode == 0, made.stderr
    run = monitor(
        "run",
        "--baseline",
        str(tmp_path / "baseline"),
        "--data",
        str(drifted),
        "--timestamp-column",
        "ts",
        "--out",
        str(tmp_path / "drift"),
        "--window",
        "1h",
        "--no-report",
        "--publish-url",
        up.url,
        "--endpoint-name",
        "churn",
        "--variant-name",
        "AllTraffic",
        "--home",
        str(up.home),
    )
    assert run.returncode == 0, run.stderr
    published = re.search(r"DriftedFeatures=(\d+)", run.stdout)
    assert published is not None and int(published.group(1)) >= 1, run.stdout  # both numeric features moved
    points = datapoints(cw, "servekit", "DriftedFeatures", "Maximum", 60, dims)
    assert [v for _, v in points] == [float(published.group(1))]
    until(
        lambda: cw.describe_alarms(AlarmNames=["churn-drift"])["MetricAlarms"][0]["StateValue"] == "ALARM",
        what="the drift alarm",
    )

    # the options are checked before any work: publishing needs an endpoint name
    bad = monitor("run", "--baseline", "b", "--data", "d", "--out", "o", "--publish-url", up.url)
    assert bad.returncode == 2 and "--endpoint-name" in bad.stderr


def test_a_large_put_metric_data_arrives_gzipped_and_is_read(up: UpProcess) -> None:
    """botocore gzips PutMetricData bodies of 10 KiB or more (Content-Encoding: gzip): they must land whole."""
    cw = up.client("cloudwatch")
    now = time.time()
    data = [
        {"MetricName": "Big", "Dimensions": [{"Name": "Shard", "Value": "s"}], "Value": float(i), "Timestamp": now}
        for i in range(400)
    ]
    cw.put_metric_data(Namespace="servekit/test", MetricData=data)
    points = cw.get_metric_statistics(
        Namespace="servekit/test",
        MetricName="Big",
        Dimensions=[{"Name": "Shard", "Value": "s"}],
        StartTime=now - 120,
        EndTime=now + 120,
        Period=60,
        Statistics=["SampleCount", "Sum"],
    )["Datapoints"]
    assert sum(p["SampleCount"] for p in points) == 400
    assert sum(p["Sum"] for p in points) == sum(range(400))
