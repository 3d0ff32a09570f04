"""Tensor parallelism on a real ``servekit up`` driven by boto3 (issue 29): a TorchScript MLP whose Linear weights
are split across two rank processes (OPTION_TENSOR_PARALLEL_DEGREE=2, torch.distributed with gloo), each loading
only its shard; the answers equal the whole model's in this process, and DescribeEndpoint shows the ranks."""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from servekit.testing.hosting import UpProcess

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.e2e, pytest.mark.extras]
FAST = {"Delay": 1, "MaxAttempts": 180}


@pytest.fixture
def model(tmp_path: Path) -> Path:
    torch.manual_seed(31)
    mlp = torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128), torch.nn.Tanh(), torch.nn.Linear(128, 8)
    ).eval()
    version = tmp_path / "tp-mlp" / "1"
    version.mkdir(parents=True)
    torch.jit.save(torch.jit.script(mlp), str(version / "model.pt"))
    return version.parent


@pytest.fixture
def up(tmp_path: Path) -> Iterator[UpProcess]:
    u = UpProcess(tmp_path / "home", "--metrics-resolution-s", "1")
    u.start()
    try:
        yield u
    finally:
        u.stop()


def describe_raw(sm: Any, name: str) -> dict[str, Any]:
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


def test_a_torch_mlp_split_across_two_ranks_answers_as_the_whole_model(up: UpProcess, model: Path) -> None:
    sm, rt = up.sm(), up.rt()
    container = {"Image": "servekit", "ModelDataUrl": str(model), "Environment": {"OPTION_TENSOR_PARALLEL_DEGREE": "2"}}
    sm.create_model(ModelName="tp-m", PrimaryContainer=container)
    sm.create_endpoint_config(
        EndpointConfigName="tp-cfg",
        ProductionVariants=[
            {"VariantName": "A", "ModelName": "tp-m", "InitialInstanceCount": 1, "InstanceType": "ml.m5.large"}
        ],
    )
    sm.create_endpoint(EndpointName="tp", EndpointConfigName="tp-cfg")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="tp", WaiterConfig=FAST)

    ranks = describe_raw(sm, "tp")["ProductionVariants"][0]["ServekitPipelineStages"][0]["Stages"]
    assert [r["InstanceId"].rsplit("-", 2)[-2:] for r in ranks] == [["rank", "0"], ["rank", "1"]]
    whole = torch.jit.load(str(model / "1" / "model.pt"))
    total = sum(p.numel() * 4 for p in whole.parameters())
    assert all(b < total * 0.6 for b in (r["WeightBytes"] for r in ranks))  # each rank holds about half

    x = np.random.default_rng(2).standard_normal((5, 64)).astype(np.float32)
    expected = whole(torch.from_numpy(x)).detach().numpy()
    for _ in range(3):  # requests one after another stay in step across the ranks
        r = rt.invoke_endpoint(EndpointName="tp", Body=json.dumps(x.tolist()), ContentType="application/json")
        got = np.asarray(json.loads(r["Body"].read()), dtype=np.float32)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)

    # each rank's compute and idle time, and the variant's Util, in CloudWatch
    cw = up.client("cloudwatch")
    deadline = time.monotonic() + 60
    while True:
        rt.invoke_endpoint(EndpointName="tp", Body=json.dumps(x.tolist()), ContentType="application/json")
        now = datetime.datetime.now(datetime.UTC)
        points = cw.get_metric_statistics(
            Namespace="/aws/sagemaker/Endpoints",
            MetricName="PipelineUtil",
            Dimensions=[{"Name": "EndpointName", "Value": "tp"}, {"Name": "VariantName", "Value": "A"}],
            StartTime=now - datetime.timedelta(minutes=2),
            EndTime=now + datetime.timedelta(minutes=1),
            Period=1,
            Statistics=["Maximum"],
        )["Datapoints"]
        if any(p["Maximum"] > 0 for p in points) or time.monotonic() > deadline:
            break
        time.sleep(0.5)  # polling another process's metrics
    assert any(0 < p["Maximum"] <= 1 for p in points), points
