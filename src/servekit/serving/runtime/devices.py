"""Where a model runs: the CPU or a GPU, decided per runtime from what that runtime reports it can use.

Every decision here is a pure function of ``servekit serve --device`` (:class:`DeviceRequest`), TF Serving's
``--per_process_gpu_memory_fraction`` and the runtime's own report (onnxruntime's ``get_available_providers``,
``torch.cuda.is_available``, TensorFlow's physical GPUs, XGBoost's CUDA build), so they are tested on machines
without a card; the runtimes apply the result. ``auto`` falls back to the CPU and says why; an explicit ``cuda``
that cannot be honoured is a :class:`DeviceUnavailable` error at load.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from servekit.accelerators.inventory import Gpu, detect_gpus, visible
from servekit.config.models import BatchingConfig, DeviceRequest
from servekit.errors import ConfigError

log = logging.getLogger(__name__)

CPU = "cpu"
CUDA_PROVIDER = "CUDAExecutionProvider"
TENSORRT_PROVIDER = "TensorrtExecutionProvider"
CPU_PROVIDER = "CPUExecutionProvider"


class DeviceUnavailable(ConfigError):
    """An explicit ``--device cuda[:N]`` this runtime cannot honour here."""


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one model runs: ``cpu`` or ``cuda:N`` (N among the process's visible GPUs), and why."""

    device: str
    reason: str

    @property
    def gpu_index(self) -> int | None:
        return int(self.device.partition(":")[2] or 0) if self.device.startswith("cuda") else None


@functools.cache
def machine_gpus() -> tuple[Gpu, ...]:
    """This process's visible GPUs (detected once per process: NVML, else ``nvidia-smi``)."""
    return visible(detect_gpus(), os.environ)


def choose(request: DeviceRequest, runtime: str, gpu_count: int, cuda_usable: bool, why_not: str = "") -> Placement:
    """Where ``runtime`` runs a model. ``gpu_count``: GPUs the runtime sees; ``cuda_usable``: whether it can run
    on one (its CUDA build or provider); ``why_not`` says what is missing when it cannot."""
    if request.kind == "cpu":
        return Placement(CPU, "--device cpu")
    missing = why_not or f"{runtime} here cannot use CUDA"
    if request.kind == "auto":
        if gpu_count == 0:
            return Placement(CPU, "no GPU on this machine")
        if not cuda_usable:
            return Placement(CPU, missing)
        return Placement("cuda:0", f"--device auto: {gpu_count} GPU(s) visible")
    index = request.index or 0
    if gpu_count == 0:
        raise DeviceUnavailable(f"--device {request.describe()}: no GPU on this machine ({runtime})")
    if not cuda_usable:
        raise DeviceUnavailable(f"--device {request.describe()}: {missing}")
    if index >= gpu_count:
        raise DeviceUnavailable(
            f"--device {request.describe()}: this process sees {gpu_count} GPU(s) (indices 0-{gpu_count - 1})"
        )
    return Placement(f"cuda:{index}", f"--device {request.describe()}")


def memory_limit_bytes(fraction: float, card_bytes: int | None) -> int | None:
    """The bytes ``--per_process_gpu_memory_fraction`` grants on a card (None: grow on demand, or unknown card)."""
    if fraction <= 0 or not card_bytes:
        return None
    return int(fraction * card_bytes)


# ---- onnxruntime ---------------------------------------------------------------------------------------------------


def onnx_placement(request: DeviceRequest, available: Sequence[str], gpus: Sequence[Gpu]) -> Placement:
    """onnxruntime: a GPU when its ``CUDAExecutionProvider`` is built in and a card is visible."""
    usable = CUDA_PROVIDER in available
    why = "" if usable else f"onnxruntime here has no {CUDA_PROVIDER} (available: {', '.join(available)})"
    return choose(request, "onnxruntime", len(gpus), usable, why)


ProviderList = list[tuple[str, dict[str, str]]]


def onnx_providers(
    placement: Placement, available: Sequence[str], fraction: float, gpus: Sequence[Gpu]
) -> ProviderList:
    """``InferenceSession``'s providers with their options, in priority order: TensorRT (when built in) and CUDA
    on the chosen card, bounded by the memory fraction (``gpu_mem_limit``; the arena grows by what is asked for
    so the bound is met exactly, else by powers of two), then the CPU for the operators they lack."""
    index = placement.gpu_index
    if index is None:
        return [(CPU_PROVIDER, {})]
    card = gpus[index].memory_bytes if index < len(gpus) else None
    limit = memory_limit_bytes(fraction, card)
    cuda: dict[str, str] = {
        "device_id": str(index),
        "arena_extend_strategy": "kSameAsRequested" if limit else "kNextPowerOfTwo",
    }
    if limit:
        cuda["gpu_mem_limit"] = str(limit)
    out: ProviderList = []
    if TENSORRT_PROVIDER in available:
        trt = {"device_id": str(index)}
        if limit:
            trt["trt_max_workspace_size"] = str(limit)
        out.append((TENSORRT_PROVIDER, trt))
    out += [(CUDA_PROVIDER, cuda), (CPU_PROVIDER, {})]
    return out


# ---- torch ---------------------------------------------------------------------------------------------------------


def torch_placement(request: DeviceRequest, cuda_available: bool, device_count: int, machine_gpus: int) -> Placement:
    """torch: ``cuda:N`` when ``torch.cuda.is_available()``, N below its ``device_count()``; ``machine_gpus``
    tells a CPU build of torch on a machine with cards from a machine without any."""
    why = "" if cuda_available else "torch here cannot use CUDA (torch.cuda.is_available() is False)"
    return choose(request, "torch", device_count if cuda_available else machine_gpus, cuda_available, why)


# ---- TensorFlow ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TfGpuSetting:
    """What one physical GPU gets before TensorFlow initialises it: memory growth, or a fixed memory limit."""

    gpu: int
    memory_growth: bool
    memory_limit_mb: int | None


def tensorflow_settings(fraction: float, card_bytes: Sequence[int | None]) -> list[TfGpuSetting]:
    """Per visible GPU: grow on demand (fraction 0, ``set_memory_growth``) or a logical device of fraction x the
    card's memory (``set_logical_device_configuration``); growth when the card's size is unknown."""
    out = []
    for i, card in enumerate(card_bytes):
        limit = memory_limit_bytes(fraction, card)
        out.append(TfGpuSetting(i, limit is None, None if limit is None else limit // 2**20))
    return out


def tensorflow_placement(
    request: DeviceRequest, physical_gpus: int, machine_gpus: int, built_with_cuda: bool
) -> Placement:
    """TensorFlow: a GPU when ``tf.config.list_physical_devices("GPU")`` lists one; else why not (a CPU build,
    or a CUDA build that found no usable card)."""
    if physical_gpus:
        return choose(request, "TensorFlow", physical_gpus, True)
    why = (
        "TensorFlow here is built without CUDA"
        if not built_with_cuda
        else "TensorFlow lists no GPU (tf.config.list_physical_devices('GPU') is empty)"
    )
    return choose(request, "TensorFlow", machine_gpus, False, why)


def tensorflow_device(placement: Placement) -> str:
    """TensorFlow's name for the placement's device."""
    index = placement.gpu_index
    return "/CPU:0" if index is None else f"/GPU:{index}"


# ---- XGBoost -------------------------------------------------------------------------------------------------------


def xgboost_params(placement: Placement) -> dict[str, str]:
    """The Booster parameter that places prediction: ``device`` (XGBoost >= 2.0)."""
    return {"device": placement.device}


# ---- batching ------------------------------------------------------------------------------------------------------

GPU_MAX_BATCH_SIZE = 256
GPU_ALLOWED_BATCH_SIZES = (8, 16, 32, 64, 128, 256)


def batching_for_device(config: BatchingConfig, device: str) -> BatchingConfig:
    """TF Serving's batching guidance for GPUs, applied only when the batching parameters are servekit's
    defaults (``--enable_batching`` without a file; a file or a model's own parameters are honoured as given):
    a larger ``max_batch_size`` (a GPU runs hundreds of rows in about the time of one), ``allowed_batch_sizes``
    padding so the kernels see six shapes instead of every size, and one batch thread per device (batches on
    the same card serialise anyway; more threads only queue on it)."""
    if not device.startswith("cuda") or config != BatchingConfig():
        return config
    return dataclasses.replace(
        config,
        max_batch_size=GPU_MAX_BATCH_SIZE,
        allowed_batch_sizes=GPU_ALLOWED_BATCH_SIZES,
        num_batch_threads=1,
    )


def log_placement(path: Path, runtime: str, placement: Placement, detail: str = "") -> None:
    """The one line per model saying where it runs."""
    where = "the CPU" if placement.device == CPU else placement.device
    extra = f"; {detail}" if detail else ""
    log.info("%s (%s) runs on %s (%s%s)", path, runtime, where, placement.reason, extra)
