"""Endpoint metrics end to end: a real `servekit up`, a real instance, InvokeEndpoint through boto3, then
boto3's cloudwatch client reads the hosting metrics back (GetMetricStatistics, GetMetricData, ListMetrics) and
Prometheus shows them at /metrics."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest
import requests

from servekit.testing.hosting import UpProcess, scaling_model

pytestmark = pytest.mark.e2e
FAST = {"Delay": 1, "MaxAttempts": 120}
DIMS = [{"Name": "EndpointName", "Value": "ep"}, {"Name": "VariantName", "Value": "A"}]


def test_invocations_latency_and_errors_read_back_through_cloudwatch(up: UpProcess, tmp_path: Path) -> None:
    sm, rt, cw = up.client("sagemaker"), up.client("sagemaker-runtime"), up.client("cloudwatch")
    sm.create_model(
        ModelName="m", PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(scaling_model(tmp_path, "m", 2.0))}
    )
    sm.create_endpoint_config(
        EndpointConfigName="cfg",
        ProductionVariants=[
            {"VariantName": "A", "ModelName": "m", "InitialInstanceCount": 1, "InstanceType": "ml.t2.medium"}
        ],
    )
    sm.create_endpoint(EndpointName="ep", EndpointConfigName="cfg")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)

    start = datetime.now(UTC) - timedelta(minutes=5)
    n = 25
    for i in range(n):
        r = rt.invoke_endpoint(EndpointName="ep", Body=json.dumps([float(i)]), ContentType="application/json")
        assert json.loads(r["Body"].read())["out"] == [2.0 * i]
    classes = {4: 0, 5: 0}
    for _ in range(3):  # the model cannot parse these: ModelError with its own status
        with pytest.raises(botocore.exceptions.ClientError) as err:
            rt.invoke_endpoint(EndpointName="ep", Body=b"not json", ContentType="application/json")
        assert err.value.response["Error"]["Code"] == "ModelError"
        classes[err.value.response["OriginalStatusCode"] // 100] += 1
    with pytest.raises(botocore.exceptions.ClientError):  # refused before a variant: not counted
        rt.invoke_endpoint(EndpointName="no-such", Body=b"[1]", ContentType="application/json")
    end = datetime.now(UTC) + timedelta(minutes=2)

    def stats(metric: str, **kw: Any) -> list[dict[str, Any]]:
        got = cw.get_metric_statistics(
            Namespace="AWS/SageMaker",
            MetricName=metric,
            Dimensions=DIMS,
            StartTime=start,
            EndTime=end,
            Period=3600,
            **kw,
        )
        assert got["Label"] == metric
        return list(got["Datapoints"])

    [inv] = stats("Invocations", Statistics=["Sum", "SampleCount"])
    assert inv["Sum"] == n + 3 and inv["SampleCount"] == n + 3 and inv["Unit"] == "None"
    [per] = stats("InvocationsPerInstance", Statistics=["Sum"])
    assert per["Sum"] == n + 3  # one instance
    [e4] = stats("Invocation4XXErrors", Statistics=["Sum", "Average"])
    [e5] = stats("Invocation5XXErrors", Statistics=["Sum"])
    assert (e4["Sum"], e5["Sum"]) == (classes[4], classes[5])
    assert e4["Average"] == pytest.approx(classes[4] / (n + 3))
    [lat] = stats("ModelLatency", ExtendedStatistics=["p50", "p99"], Unit="Microseconds")
    assert 0 < lat["ExtendedStatistics"]["p50"] <= lat["ExtendedStatistics"]["p99"] < 60e6
    assert lat["Unit"] == "Microseconds"
    [over] = stats("OverheadLatency", Statistics=["Average", "Maximum"])
    assert 0 <= over["Average"] <= over["Maximum"]
    assert stats("Invocations", Statistics=["Sum"], Unit="Seconds") == []  # another unit: no datapoints
    with pytest.raises(botocore.exceptions.ClientError) as err:
        stats("Invocations", Statistics=["Sum"], ExtendedStatistics=["p99"])
    assert err.value.response["Error"]["Code"] == "InvalidParameterCombination"

    data = cw.get_metric_data(
        MetricDataQueries=[
            {
                "Id": "inv",
                "MetricStat": {
                    "Metric": {"Namespace": "AWS/SageMaker", "MetricName": "Invocations", "Dimensions": DIMS},
                    "Period": 60,
                    "Stat": "Sum",
                },
            },
            {
                "Id": "p99",
                "Label": "model p99",
                "MetricStat": {
                    "Metric": {"Namespace": "AWS/SageMaker", "MetricName": "ModelLatency", "Dimensions": DIMS},
                    "Period": 60,
                    "Stat": "p99",
                },
            },
            {
                "Id": "hidden",
                "ReturnData": False,
                "MetricStat": {
                    "Metric": {"Namespace": "AWS/SageMaker", "MetricName": "Invocations", "Dimensions": DIMS},
                    "Period": 60,
                    "Stat": "Sum",
                },
            },
        ],
        StartTime=start,
        EndTime=end,
        ScanBy="TimestampAscending",
    )
    by_id = {r["Id"]: r for r in data["MetricDataResults"]}
    assert set(by_id) == {"inv", "p99"}
    assert sum(by_id["inv"]["Values"]) == n + 3 and by_id["inv"]["StatusCode"] == "Complete"
    assert by_id["inv"]["Timestamps"] == sorted(by_id["inv"]["Timestamps"])
    assert by_id["p99"]["Label"] == "model p99" and by_id["p99"]["Values"]
    with pytest.raises(botocore.exceptions.ClientError) as err:
        cw.get_metric_data(
            MetricDataQueries=[{"Id": "m1", "Expression": "SUM(METRICS())"}], StartTime=start, EndTime=end
        )
    assert err.value.response["Error"]["Code"] == "InvalidParameterValue"
    assert "metric math" in err.value.response["Error"]["Message"]

    listed = cw.list_metrics(Namespace="AWS/SageMaker", Dimensions=[{"Name": "EndpointName", "Value": "ep"}])
    names = {m["MetricName"] for m in listed["Metrics"]}
    assert {"Invocations", "ModelLatency", "OverheadLatency", "Invocation4XXErrors"} <= names
    # each metric twice: per variant, and per variant and the endpoint config whose fleet answered
    with_config = sorted([*DIMS, {"Name": "EndpointConfigName", "Value": "cfg"}], key=lambda d: d["Name"])
    assert all(m["Dimensions"] in (DIMS, with_config) for m in listed["Metrics"])
    assert sum(m["Dimensions"] == with_config for m in listed["Metrics"]) == len(names)
    assert cw.list_metrics(Namespace="AWS/SageMaker", MetricName="Nope")["Metrics"] == []

    text = requests.get(f"{up.url}/metrics", timeout=10).text
    assert 'servekit_endpoint_model_latency_seconds_count{endpoint="ep",variant="A"} 28.0' in text
    errors = sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith('servekit_endpoint_invocation_errors_total{endpoint="ep"')
    )
    assert errors == 3
