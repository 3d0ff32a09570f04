"""GPU placement on a real ``servekit up`` with boto3, for endpoints and training jobs alike. Without a GPU (the
plane's ``CUDA_VISIBLE_DEVICES=""``), a training job on ``ml.g4dn.xlarge`` ends Failed with the counts. With one GPU
(an ``nvidia-smi`` on PATH that lists a T4: the one part that cannot run here), the first GPU endpoint's instance
gets ``CUDA_VISIBLE_DEVICES=0`` and its onnxruntime (a CPU build) says why it stays on the CPU; a second GPU
endpoint finds the card taken and fails with "(0 free)"; once the first is deleted, a training job gets the card:
``SM_NUM_GPUS=1`` and ``CUDA_VISIBLE_DEVICES=0`` in its sandbox."""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Iterator
from pathlib import Path

import botocore.exceptions
import pytest
from tests.e2e.test_training_jobs import FAST, clients, job

from servekit.testing.hosting import UpProcess
from servekit.tools.demo.build import iris_onnx

pytestmark = pytest.mark.e2e
GPU_TYPE = {"InstanceType": "ml.g4dn.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10}
SHOW = textwrap.dedent(
    """
    import json, os
    env = json.loads(os.environ["SM_TRAINING_ENV"])
    print("gpus", os.environ["SM_NUM_GPUS"], os.environ.get("CUDA_VISIBLE_DEVICES"), env["num_gpus"], flush=True)
    open(os.path.join(os.environ["SM_MODEL_DIR"], "done"), "w").write("1")
    """
)
FAKE_SMI = "#!/bin/sh\necho '0, Tesla T4, 15360, GPU-00000000-fake'\n"


def _up(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[UpProcess]:
    u = UpProcess(home)
    u.start()
    try:
        yield u
    finally:
        u.stop()


@pytest.fixture
def up_without_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[UpProcess]:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    yield from _up(tmp_path / "home", monkeypatch)


@pytest.fixture
def up_with_one_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[UpProcess]:
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    yield from _up(tmp_path / "home", monkeypatch)


def _failed(sm: object, name: str) -> str:
    with pytest.raises(botocore.exceptions.WaiterError):
        sm.get_waiter("training_job_completed_or_stopped").wait(  # type: ignore[attr-defined]
            TrainingJobName=name, WaiterConfig=FAST
        )
    d = sm.describe_training_job(TrainingJobName=name)  # type: ignore[attr-defined]
    assert d["TrainingJobStatus"] == "Failed"
    return str(d["FailureReason"])


def test_a_gpu_training_job_without_a_gpu_fails_with_the_counts(up_without_gpu: UpProcess) -> None:
    sm, s3, _ = clients(up_without_gpu)
    sm.create_training_job(**job(s3, "gpu-fit", SHOW, ResourceConfig=GPU_TYPE))
    assert _failed(sm, "gpu-fit") == "CapacityError: ml.g4dn.xlarge needs 1 GPU, this machine has 0"


def _endpoint(sm: object, name: str, model: Path) -> None:
    sm.create_model(ModelName=name, PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(model)})  # type: ignore[attr-defined]
    sm.create_endpoint_config(  # type: ignore[attr-defined]
        EndpointConfigName=name,
        ProductionVariants=[
            {"VariantName": "A", "ModelName": name, "InitialInstanceCount": 1, "InstanceType": "ml.g4dn.xlarge"}
        ],
    )
    sm.create_endpoint(EndpointName=name, EndpointConfigName=name)  # type: ignore[attr-defined]


def test_one_gpu_goes_to_one_instance_then_to_a_training_job(up_with_one_gpu: UpProcess, tmp_path: Path) -> None:
    up = up_with_one_gpu
    sm, s3, logs = clients(up)
    model = tmp_path / "iris"
    iris_onnx(model / "1")
    _endpoint(sm, "first", model)
    sm.get_waiter("endpoint_in_service").wait(EndpointName="first", WaiterConfig=FAST)
    (log,) = (up.home / "instances").glob("first-*.log")
    text = log.read_text()
    assert "(onnxruntime) runs on the CPU (onnxruntime here has no CUDAExecutionProvider" in text
    assert "no GPU on this machine" not in text  # the instance sees its card (CUDA_VISIBLE_DEVICES=0)

    _endpoint(sm, "second", model)
    with pytest.raises(botocore.exceptions.WaiterError):
        sm.get_waiter("endpoint_in_service").wait(EndpointName="second", WaiterConfig=FAST)
    reason = sm.describe_endpoint(EndpointName="second")["FailureReason"]
    assert reason == "ml.g4dn.xlarge needs 1 GPU, this machine has 1 (0 free)"

    sm.create_training_job(**job(s3, "held", SHOW, ResourceConfig=GPU_TYPE))
    assert _failed(sm, "held") == "CapacityError: ml.g4dn.xlarge needs 1 GPU, this machine has 1 (0 free)"

    sm.delete_endpoint(EndpointName="first")
    sm.get_waiter("endpoint_deleted").wait(EndpointName="first", WaiterConfig=FAST)
    sm.create_training_job(**job(s3, "gpu-fit", SHOW, ResourceConfig=GPU_TYPE))
    sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="gpu-fit", WaiterConfig=FAST)
    d = sm.describe_training_job(TrainingJobName="gpu-fit")
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    group = "/aws/sagemaker/TrainingJobs"
    stream = logs.describe_log_streams(logGroupName=group, logStreamNamePrefix="gpu-fit/")["logStreams"][0]
    events = logs.get_log_events(logGroupName=group, logStreamName=stream["logStreamName"], startFromHead=True)
    assert "gpus 1 0 1" in [e["message"] for e in events["events"]], json.dumps(events["events"])[:2000]
