"""Where each runtime runs a model (``--device``, ``--per_process_gpu_memory_fraction``): the pure decisions with
injected availability for the CUDA cases, and onnxruntime's and XGBoost's real APIs on this machine's CPU builds."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import xgboost as xgb

from servekit.accelerators.inventory import Gpu
from servekit.config.models import BatchingConfig, DeviceRequest, RuntimeOptions
from servekit.errors import ConfigError
from servekit.serving.runtime import devices
from servekit.serving.runtime.devices import (
    CPU_PROVIDER,
    CUDA_PROVIDER,
    TENSORRT_PROVIDER,
    DeviceUnavailable,
    Placement,
    batching_for_device,
    onnx_placement,
    onnx_providers,
    tensorflow_placement,
    tensorflow_settings,
    torch_placement,
)
from servekit.serving.runtime.manifest import Manifest, read_manifest
from servekit.serving.runtime.onnx import OnnxRuntime
from servekit.serving.runtime.registry import RuntimeRegistry
from servekit.tools.demo.build import iris_onnx

AUTO, CPU, CUDA = DeviceRequest(), DeviceRequest("cpu"), DeviceRequest("cuda")
T4 = Gpu(0, "Tesla T4", 16 * 2**30, "GPU-aaaa")
A10G = Gpu(1, "NVIDIA A10G", 24 * 2**30, "GPU-bbbb")
WITH_CUDA = ("CUDAExecutionProvider", "CPUExecutionProvider")
WITH_TRT = ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")


# ---- --device parsing -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind", "index"),
    [
        ("auto", "auto", None),
        ("cpu", "cpu", None),
        ("cuda", "cuda", None),
        ("cuda:1", "cuda", 1),
        (" CUDA:0", "cuda", 0),
    ],
)
def test_device_flag_parses(text: str, kind: str, index: int | None) -> None:
    assert DeviceRequest.parse(text) == DeviceRequest(kind, index)  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["gpu", "cuda:", "cuda:-1", "cpu:0", "auto:1", "cuda:x", ""])
def test_device_flag_refuses_anything_else(text: str) -> None:
    with pytest.raises(ConfigError, match="--device must be auto, cpu, cuda or cuda:N"):
        DeviceRequest.parse(text)


@pytest.mark.parametrize("fraction", [-0.01, 1.01, float("nan")])
def test_memory_fraction_is_within_0_and_1(fraction: float) -> None:
    with pytest.raises(ConfigError, match=r"per_process_gpu_memory_fraction must be within 0..1"):
        RuntimeOptions(gpu_memory_fraction=fraction)
    assert RuntimeOptions(gpu_memory_fraction=1.0).gpu_memory_fraction == 1.0


# ---- the shared decision ---------------------------------------------------------------------------------------------


def test_auto_takes_the_first_gpu_only_when_the_runtime_can_use_it() -> None:
    assert devices.choose(AUTO, "rt", 2, True) == Placement("cuda:0", "--device auto: 2 GPU(s) visible")
    assert devices.choose(AUTO, "rt", 0, True) == Placement("cpu", "no GPU on this machine")
    assert devices.choose(AUTO, "rt", 1, False, "rt lacks CUDA") == Placement("cpu", "rt lacks CUDA")
    assert devices.choose(CPU, "rt", 4, True) == Placement("cpu", "--device cpu")


def test_an_explicit_cuda_is_refused_with_the_reason() -> None:
    with pytest.raises(DeviceUnavailable, match=r"--device cuda: no GPU on this machine \(rt\)"):
        devices.choose(CUDA, "rt", 0, True)
    with pytest.raises(DeviceUnavailable, match="--device cuda: rt lacks CUDA"):
        devices.choose(CUDA, "rt", 1, False, "rt lacks CUDA")
    with pytest.raises(DeviceUnavailable, match=r"--device cuda:2: this process sees 2 GPU\(s\) \(indices 0-1\)"):
        devices.choose(DeviceRequest("cuda", 2), "rt", 2, True)
    assert devices.choose(DeviceRequest("cuda", 1), "rt", 2, True).device == "cuda:1"


# ---- onnxruntime ---------------------------------------------------------------------------------------------------


def test_onnx_providers_on_a_gpu_bound_by_the_fraction() -> None:
    placement = onnx_placement(DeviceRequest("cuda", 1), WITH_CUDA, (T4, A10G))
    assert placement.device == "cuda:1"
    assert onnx_providers(placement, WITH_CUDA, 0.4, (T4, A10G)) == [
        (
            CUDA_PROVIDER,
            {
                "device_id": "1",
                "arena_extend_strategy": "kSameAsRequested",
                "gpu_mem_limit": str(int(0.4 * 24 * 2**30)),
            },
        ),
        (CPU_PROVIDER, {}),
    ]


def test_onnx_providers_grow_on_demand_and_put_tensorrt_first() -> None:
    placement = onnx_placement(AUTO, WITH_TRT, (T4,))
    assert onnx_providers(placement, WITH_TRT, 0.0, (T4,)) == [
        (TENSORRT_PROVIDER, {"device_id": "0"}),
        (CUDA_PROVIDER, {"device_id": "0", "arena_extend_strategy": "kNextPowerOfTwo"}),
        (CPU_PROVIDER, {}),
    ]


def test_this_onnxruntime_reports_no_cuda_so_auto_runs_on_the_cpu_even_beside_a_card() -> None:
    available = ort.get_available_providers()  # the CPU build installed here
    assert CUDA_PROVIDER not in available
    placement = onnx_placement(AUTO, available, (T4,))
    assert placement.device == "cpu"
    assert f"onnxruntime here has no {CUDA_PROVIDER}" in placement.reason
    assert onnx_providers(placement, available, 0.4, (T4,)) == [(CPU_PROVIDER, {})]
    with pytest.raises(DeviceUnavailable, match=f"--device cuda: onnxruntime here has no {CUDA_PROVIDER}"):
        onnx_placement(CUDA, available, (T4,))


@pytest.fixture(scope="module")
def iris(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return iris_onnx(tmp_path_factory.mktemp("iris") / "1")


def test_onnx_runtime_loads_on_the_cpu_and_logs_where(iris: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "servekit.serving.runtime.devices")
    servable = OnnxRuntime(gpus=lambda: ()).load(iris, _manifest(iris), RuntimeOptions())
    assert getattr(servable, "device", None) == "cpu"
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [f"{iris} (onnxruntime) runs on the CPU (no GPU on this machine; CPUExecutionProvider)"]
    out = servable.predict("serving_default", {"X": np.zeros((2, 4), np.float32)})
    assert len(next(iter(out.values()))) == 2


def test_onnx_runtime_refuses_an_explicit_cuda_it_cannot_honour(iris: Path) -> None:
    with pytest.raises(DeviceUnavailable, match=f"--device cuda:0: onnxruntime here has no {CUDA_PROVIDER}"):
        OnnxRuntime(gpus=lambda: (T4,)).load(iris, _manifest(iris), RuntimeOptions(device=DeviceRequest("cuda", 0)))


def test_onnxruntime_dropping_the_cuda_provider_is_caught(
    iris: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A GPU build that cannot start CUDA (libraries missing) runs the session on the CPU without an error: the
    real InferenceSession, told that CUDA is available, shows what it kept in ``get_providers``."""
    monkeypatch.setattr(ort, "get_available_providers", lambda: list(WITH_CUDA))
    caplog.set_level(logging.INFO, "servekit.serving.runtime.devices")
    runtime = OnnxRuntime(gpus=lambda: (T4,))
    dropped = "Specified provider 'CUDAExecutionProvider' is not in available provider names"  # ort's own warning
    with (
        pytest.warns(UserWarning, match=dropped),
        pytest.raises(DeviceUnavailable, match=f"onnxruntime could not start {CUDA_PROVIDER}"),
    ):
        runtime.load(iris, _manifest(iris), RuntimeOptions(device=CUDA, gpu_memory_fraction=0.4))
    with pytest.warns(UserWarning, match=dropped):
        servable = runtime.load(iris, _manifest(iris), RuntimeOptions())
    assert getattr(servable, "device", None) == "cpu"
    assert f"runs on the CPU (onnxruntime could not start {CUDA_PROVIDER}" in caplog.text


def _manifest(path: Path) -> Manifest:
    return read_manifest(path)


# ---- torch, TensorFlow (decisions; the runtimes' own APIs in test_device_placement_extras.py) ------------------------


def test_torch_placement() -> None:
    assert torch_placement(AUTO, True, 2, 2).device == "cuda:0"
    assert torch_placement(DeviceRequest("cuda", 1), True, 2, 2).device == "cuda:1"
    cpu_build = torch_placement(AUTO, False, 0, 1)
    assert cpu_build == Placement("cpu", "torch here cannot use CUDA (torch.cuda.is_available() is False)")
    with pytest.raises(DeviceUnavailable, match="no GPU on this machine"):
        torch_placement(CUDA, False, 0, 0)
    with pytest.raises(DeviceUnavailable, match=r"torch\.cuda\.is_available"):
        torch_placement(CUDA, False, 0, 1)


def test_tensorflow_memory_growth_or_a_limit_per_gpu() -> None:
    assert [(s.gpu, s.memory_growth, s.memory_limit_mb) for s in tensorflow_settings(0.0, [16 * 2**30])] == [
        (0, True, None)
    ]
    assert [(s.memory_growth, s.memory_limit_mb) for s in tensorflow_settings(0.4, [16 * 2**30, None])] == [
        (False, int(0.4 * 16 * 1024)),
        (True, None),  # a card whose size is unknown grows on demand rather than guessing a limit
    ]
    assert tensorflow_placement(AUTO, 1, 1, True).device == "cuda:0"
    assert devices.tensorflow_device(Placement("cuda:1", "")) == "/GPU:1"
    assert devices.tensorflow_device(Placement("cpu", "")) == "/CPU:0"
    assert "built without CUDA" in tensorflow_placement(AUTO, 0, 1, False).reason
    with pytest.raises(DeviceUnavailable, match="lists no GPU"):
        tensorflow_placement(CUDA, 0, 1, True)


# ---- XGBoost ---------------------------------------------------------------------------------------------------------


def test_xgboost_uses_its_build_info(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.random.default_rng(1).normal(size=(40, 3))
    version = tmp_path / "1"
    version.mkdir()
    xgb.XGBRegressor(n_estimators=3).fit(x, x[:, 0]).save_model(version / "model.json")
    registry = RuntimeRegistry()
    assert getattr(registry.load(version), "device", None) == "cpu"
    monkeypatch.setattr(devices, "machine_gpus", lambda: (T4,))  # a card beside this CPU build of XGBoost
    assert not xgb.build_info().get("USE_CUDA", False)
    assert getattr(registry.load(version), "device", None) == "cpu"
    with pytest.raises(DeviceUnavailable, match=r"XGBoost here is built without CUDA"):
        registry.load(version, options=RuntimeOptions(device=CUDA))
    assert devices.xgboost_params(Placement("cuda:1", "")) == {"device": "cuda:1"}


# ---- batching ------------------------------------------------------------------------------------------------------


def test_gpu_batching_defaults_apply_only_to_the_default_parameters() -> None:
    gpu = batching_for_device(BatchingConfig(), "cuda:0")
    assert (gpu.max_batch_size, gpu.allowed_batch_sizes, gpu.num_batch_threads) == (
        256,
        (8, 16, 32, 64, 128, 256),
        1,
    )
    assert gpu.batch_timeout_micros == BatchingConfig().batch_timeout_micros
    assert batching_for_device(BatchingConfig(), "cpu") == BatchingConfig()
    mine = BatchingConfig(max_batch_size=32)
    assert batching_for_device(mine, "cuda:0") is mine  # a file's parameters are honoured as given
