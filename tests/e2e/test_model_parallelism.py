"""Pipeline parallelism on a real ``servekit up`` driven by boto3 (issue 29): an ONNX MLP of ~64 MB, built here
with onnx.helper from seeded numpy weights, on an instance type whose memory holds an idle instance plus three
quarters of the model. Without parallelism the endpoint fails with the sizes; with
``OPTION_PIPELINE_PARALLEL_DEGREE=2`` it is served by two stage processes whose answers equal onnxruntime's on the
whole model in this process, DescribeEndpoint shows the stages and CloudWatch gets the variant's PipelineUtil."""

from __future__ import annotations

import datetime
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import botocore.exceptions
import numpy as np
import pytest

from servekit.services.hosting.pipeline import IDLE_INSTANCE_BYTES
from servekit.testing.hosting import UpProcess
from servekit.testing.onnx_models import write_deep_mlp

onnx = pytest.importorskip("onnx")  # in the test install; servekit[optimize] for users
ort = pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.e2e
FAST = {"Delay": 1, "MaxAttempts": 180}
WIDTH, LAYERS = 2048, 4  # 4 x 2048 x 2048 float32 = 64 MiB of weights
T = TypeVar("T")


def mlp(path: Path, seed: int = 29) -> int:
    """Write the MLP to ``path``; returns its file's bytes."""
    return write_deep_mlp(path, WIDTH, LAYERS, seed=seed)


@pytest.fixture
def model(tmp_path: Path) -> tuple[Path, int]:
    base = tmp_path / "mlp"
    return base, mlp(base / "1" / "model.onnx")


@pytest.fixture
def up(tmp_path: Path, model: tuple[Path, int]) -> Iterator[UpProcess]:
    _, size = model
    memory = IDLE_INSTANCE_BYTES + size * 3 // 4  # an idle instance plus three quarters of the model
    types = tmp_path / "types.yaml"
    types.write_text(
        f"instance_types:\n  - name: ml.local.quarter\n    vcpus: 1\n    memory_gib: {memory / 2**30:.6f}\n"
        "    price_per_hour: 0\n"
    )
    u = UpProcess(tmp_path / "home", "--instance-types", str(types), "--metrics-resolution-s", "1")
    u.start()
    try:
        yield u
    finally:
        u.stop()


def endpoint(sm: Any, name: str, model_dir: Path, environment: dict[str, str]) -> None:
    container = {"Image": "servekit", "ModelDataUrl": str(model_dir), "Environment": environment}
    sm.create_model(ModelName=f"{name}-m", PrimaryContainer=container)
    variant = {"VariantName": "A", "ModelName": f"{name}-m", "InitialInstanceCount": 1}
    sm.create_endpoint_config(
        EndpointConfigName=f"{name}-cfg", ProductionVariants=[{**variant, "InstanceType": "ml.local.quarter"}]
    )
    sm.create_endpoint(EndpointName=name, EndpointConfigName=f"{name}-cfg")


def describe_raw(sm: Any, name: str) -> dict[str, Any]:
    """DescribeEndpoint as sent (botocore's parser drops servekit's extension keys)."""
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


def poll(fetch: Callable[[], T], done: Callable[[T], bool], timeout_s: float = 60.0) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        value = fetch()
        if done(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.5)  # polling another process's metrics


def test_a_model_over_the_envelope_fails_alone_and_is_served_in_two_stages(
    up: UpProcess, model: tuple[Path, int]
) -> None:
    base, size = model
    sm, rt = up.sm(), up.rt()
    endpoint(sm, "whole", base, {})
    with pytest.raises(botocore.exceptions.WaiterError):
        sm.get_waiter("endpoint_in_service").wait(EndpointName="whole", WaiterConfig=FAST)
    desc = sm.describe_endpoint(EndpointName="whole")
    assert desc["EndpointStatus"] == "Failed"
    reason = desc["FailureReason"]
    memory = IDLE_INSTANCE_BYTES + size * 3 // 4
    assert f"weights {size / 2**20:.1f} MiB" in reason and f"{memory / 2**20:.1f} MiB" in reason, reason
    assert "OPTION_PIPELINE_PARALLEL_DEGREE" in reason, reason

    endpoint(sm, "piped", base, {"OPTION_PIPELINE_PARALLEL_DEGREE": "2", "OPTION_PIPELINE_MICRO_BATCHES": "4"})
    sm.get_waiter("endpoint_in_service").wait(EndpointName="piped", WaiterConfig=FAST)

    # two stage processes, each a servekit serve of its own half of the weights
    stages = describe_raw(sm, "piped")["ProductionVariants"][0]["ServekitPipelineStages"]
    assert len(stages) == 1 and [s["Stage"] for s in stages[0]["Stages"]] == [0, 1]
    halves = [s["WeightBytes"] for s in stages[0]["Stages"]]
    assert all(size * 0.4 < b < size * 0.6 for b in halves), halves
    pids = [int((up.home / "instances" / f"{s['InstanceId']}.pid").read_text()) for s in stages[0]["Stages"]]
    assert len(set(pids)) == 2 and all(Path(f"/proc/{p}").exists() for p in pids)
    for pid, stage in zip(pids, stages[0]["Stages"], strict=True):
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert os.fsencode(f"stage-{stage['Stage']}") in cmdline[cmdline.index(b"--model_base_path") + 1]

    rng = np.random.default_rng(7)
    x = rng.standard_normal((8, WIDTH)).astype(np.float32)
    expected = ort.InferenceSession(str(base / "1" / "model.onnx")).run(None, {"x": x})[0]
    for rows in (x, x[:1]):  # a batch cut into micro-batches, and a single row
        r = rt.invoke_endpoint(EndpointName="piped", Body=json.dumps(rows.tolist()), ContentType="application/json")
        got = np.asarray(json.loads(r["Body"].read()), dtype=np.float32)
        np.testing.assert_allclose(got, expected[: len(rows)], rtol=1e-4, atol=1e-5)

    # each stage's compute and idle time, and the variant's Util, in CloudWatch
    cw = up.client("cloudwatch")

    def most(metric: str, *extra: dict[str, str]) -> float:
        for _ in range(5):
            rt.invoke_endpoint(EndpointName="piped", Body=json.dumps(x.tolist()), ContentType="application/json")
        now = datetime.datetime.now(datetime.UTC)
        points = cw.get_metric_statistics(
            Namespace="/aws/sagemaker/Endpoints",
            MetricName=metric,
            Dimensions=[{"Name": "EndpointName", "Value": "piped"}, {"Name": "VariantName", "Value": "A"}, *extra],
            StartTime=now - datetime.timedelta(minutes=2),
            EndTime=now + datetime.timedelta(minutes=1),
            Period=1,
            Statistics=["Maximum"],
        )["Datapoints"]
        return max((p["Maximum"] for p in points), default=0.0)

    util = poll(lambda: most("PipelineUtil"), lambda v: v > 0)
    assert 0 < util <= 1
    assert poll(lambda: most("StageComputeTime", {"Name": "Stage", "Value": "1"}), lambda v: v > 0) > 0
