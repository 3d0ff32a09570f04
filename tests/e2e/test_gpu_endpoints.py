"""GPU instance types on a real ``servekit up`` driven by boto3, on a machine without a GPU (CI's; a machine with
cards hides them from the plane with ``CUDA_VISIBLE_DEVICES=""``): a ``ml.g4dn.xlarge`` endpoint ends Failed with
the GPU counts in FailureReason, while a CPU type beside it serves on the CPU with its instance hidden from every
card, and DescribeEndpoint's cost uses the GPU type's price."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import botocore.exceptions
import pytest

from servekit.testing.hosting import UpProcess
from servekit.tools.demo.build import iris_onnx

pytestmark = pytest.mark.e2e
FAST = {"Delay": 1, "MaxAttempts": 120}


@pytest.fixture
def up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[UpProcess]:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # the plane's cards: none
    u = UpProcess(tmp_path / "home")
    u.start()
    try:
        yield u
    finally:
        u.stop()


def _endpoint(sm: object, name: str, model_dir: Path, instance_type: str) -> None:
    sm.create_model(  # type: ignore[attr-defined]
        ModelName=f"{name}-model", PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(model_dir)}
    )
    sm.create_endpoint_config(  # type: ignore[attr-defined]
        EndpointConfigName=f"{name}-cfg",
        ProductionVariants=[
            {
                "VariantName": "A",
                "ModelName": f"{name}-model",
                "InitialInstanceCount": 1,
                "InstanceType": instance_type,
            }
        ],
    )
    sm.create_endpoint(EndpointName=name, EndpointConfigName=f"{name}-cfg")  # type: ignore[attr-defined]


def test_a_gpu_endpoint_fails_with_the_gpu_counts_and_a_cpu_one_serves(up: UpProcess, tmp_path: Path) -> None:
    model = tmp_path / "iris"
    iris_onnx(model / "1")
    sm = up.sm()
    _endpoint(sm, "gpu-ep", model, "ml.g4dn.xlarge")
    _endpoint(sm, "cpu-ep", model, "ml.m5.large")
    with pytest.raises(botocore.exceptions.WaiterError):
        sm.get_waiter("endpoint_in_service").wait(EndpointName="gpu-ep", WaiterConfig=FAST)
    desc = sm.describe_endpoint(EndpointName="gpu-ep")
    assert desc["EndpointStatus"] == "Failed"
    assert desc["FailureReason"] == "ml.g4dn.xlarge needs 1 GPU, this machine has 0"
    assert not list((up.home / "instances").glob("gpu-ep-*.log"))  # no process was started for it

    sm.get_waiter("endpoint_in_service").wait(EndpointName="cpu-ep", WaiterConfig=FAST)
    answer = up.rt().invoke_endpoint(EndpointName="cpu-ep", ContentType="text/csv", Body=b"5.1,3.5,1.4,0.2")
    assert answer["ResponseMetadata"]["HTTPStatusCode"] == 200
    (log,) = (up.home / "instances").glob("cpu-ep-*.log")
    assert "(onnxruntime) runs on the CPU (no GPU on this machine" in log.read_text()
